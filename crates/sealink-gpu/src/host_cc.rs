//! Tests' access to the host's C compiler, which checks the CUDA C source without a GPU.

use std::path::PathBuf;
use std::process::Command;

/// Compiles `source` with `cc -O2 -std=gnu11 -Wall -Werror` plus `args` into a fresh
/// directory under the temporary directory; the executable, or `None` without `cc` (the
/// caller skips, saying so). A source that does not compile fails the test.
pub(crate) fn compile(name: &str, source: &str, args: &[&str]) -> Option<PathBuf> {
    if Command::new("cc").arg("--version").output().is_err() {
        return None;
    }
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sealink-gpu-{name}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join(format!("{name}.c")), dir.join(name));
    std::fs::write(&src, source).unwrap();
    let out = Command::new("cc")
        .args([
            "-O2",
            "-std=gnu11",
            "-Wall",
            "-Werror",
            "-Wno-unused-function",
        ])
        .args(args)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cc failed on {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}
