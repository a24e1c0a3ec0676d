//! Which config file `sealink up ARG` (and `reload ARG`) reads: ARG itself when it looks like a
//! path, else sealink's `NAME.toml` in the config directory or, failing that, wg-quick's
//! `/etc/wireguard/NAME.conf`, as wg-quick resolves `wg-quick up wg0`.

use std::path::{Path, PathBuf};

use crate::{Config, TunnelError};

/// Where configs named by NAME live unless $SEALINK_CONFIG_DIR says otherwise.
pub const CONFIG_DIR: &str = "/etc/sealink";

/// Where wg-quick keeps its configs: `sealink up wg0` finds /etc/wireguard/wg0.conf when there
/// is no sealink config of that name.
pub const WG_CONFIG_DIR: &str = "/etc/wireguard";

/// Why [`load`] found no config to run.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// A bare NAME with neither file: both places looked in are named.
    #[error(
        "no config for {}: neither {} nor {} exists (or name the file: sealink up PATH)",
        name.display(),
        ours.display(),
        wg.display()
    )]
    Missing {
        name: PathBuf,
        ours: PathBuf,
        wg: PathBuf,
    },
    /// Reading the file failed; the error names the file already.
    #[error(transparent)]
    Read(TunnelError),
    /// The file does not parse, or holds what a tunnel cannot run.
    #[error("config {}", path.display())]
    Invalid {
        path: PathBuf,
        #[source]
        source: TunnelError,
    },
}

/// The config directory: $SEALINK_CONFIG_DIR, else [`CONFIG_DIR`].
fn config_dir() -> Option<PathBuf> {
    std::env::var_os("SEALINK_CONFIG_DIR").map(PathBuf::from)
}

/// The config file `up ARG` reads: ARG itself when it looks like a path (it has a `/` or ends in
/// `.toml` or `.conf`), else `DIR/ARG.toml` (DIR: `dir`, else [`CONFIG_DIR`]) or, when that
/// does not exist, `WG_CONFIG_DIR/ARG.conf`.
pub fn resolve_in(arg: &Path, dir: Option<PathBuf>) -> PathBuf {
    resolve_among(arg, dir, Path::new(WG_CONFIG_DIR))
}

/// [`resolve_in`] the config directory $SEALINK_CONFIG_DIR names.
pub fn resolve(arg: &Path) -> PathBuf {
    resolve_in(arg, config_dir())
}

fn resolve_among(arg: &Path, dir: Option<PathBuf>, wg_dir: &Path) -> PathBuf {
    let text = arg.as_os_str().as_encoded_bytes();
    if text.contains(&b'/')
        || text.ends_with(b".toml")
        || text.ends_with(b".conf")
        || text.is_empty()
    {
        return arg.to_path_buf();
    }
    let mut name = arg.as_os_str().to_owned();
    name.push(".toml");
    let ours = dir.unwrap_or_else(|| PathBuf::from(CONFIG_DIR)).join(name);
    let wg = wg_dir.join(wg_name(arg));
    if !ours.exists() && wg.exists() {
        wg
    } else {
        ours
    }
}

fn wg_name(arg: &Path) -> std::ffi::OsString {
    let mut wg = arg.as_os_str().to_owned();
    wg.push(".conf");
    wg
}

/// The config `up ARG` or `reload ARG` reads ([`resolve`]), read and parsed, with its path.
pub fn load(arg: &Path) -> Result<(PathBuf, Config), LookupError> {
    let path = resolve(arg);
    if path != arg && !path.exists() {
        return Err(LookupError::Missing {
            name: arg.to_path_buf(),
            ours: path,
            wg: Path::new(WG_CONFIG_DIR).join(wg_name(arg)),
        });
    }
    match Config::from_file(&path) {
        Ok(cfg) => Ok((path, cfg)),
        Err(e @ TunnelError::Io { .. }) => Err(LookupError::Read(e)),
        Err(source) => Err(LookupError::Invalid { path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_resolves_a_name_to_the_config_directory() {
        let dir = Some(PathBuf::from("/x/conf"));
        let r = |a: &str| resolve_in(Path::new(a), dir.clone());
        assert_eq!(r("sl0"), Path::new("/x/conf/sl0.toml"));
        assert_eq!(r("wg.office"), Path::new("/x/conf/wg.office.toml"));
        // Paths stay paths.
        assert_eq!(r("./sl0"), Path::new("./sl0"));
        assert_eq!(
            r("/etc/sealink/sl0.toml"),
            Path::new("/etc/sealink/sl0.toml")
        );
        assert_eq!(r("sl0.toml"), Path::new("sl0.toml"));
        assert_eq!(r("conf/sl0"), Path::new("conf/sl0"));
        assert_eq!(
            resolve_in(Path::new("sl0"), None),
            Path::new("/etc/sealink/sl0.toml")
        );
        assert_eq!(r("wg0.conf"), Path::new("wg0.conf"));
    }

    #[test]
    fn up_falls_back_to_wg_quicks_directory() {
        let d = tempfile::tempdir().unwrap();
        let (ours, wg) = (d.path().join("sealink"), d.path().join("wireguard"));
        std::fs::create_dir_all(&ours).unwrap();
        std::fs::create_dir_all(&wg).unwrap();
        std::fs::write(wg.join("wg0.conf"), "").unwrap();
        let r = |a: &str| resolve_among(Path::new(a), Some(ours.clone()), &wg);
        assert_eq!(r("wg0"), wg.join("wg0.conf"), "only wg-quick's exists");
        std::fs::write(ours.join("wg0.toml"), "").unwrap();
        assert_eq!(r("wg0"), ours.join("wg0.toml"), "sealink's comes first");
        assert_eq!(
            r("wg1"),
            ours.join("wg1.toml"),
            "neither: sealink's is named"
        );
    }

    #[test]
    fn a_missing_name_says_both_places() {
        let e = LookupError::Missing {
            name: "sl9".into(),
            ours: "/etc/sealink/sl9.toml".into(),
            wg: "/etc/wireguard/sl9.conf".into(),
        };
        assert_eq!(
            e.to_string(),
            "no config for sl9: neither /etc/sealink/sl9.toml nor /etc/wireguard/sl9.conf exists \
             (or name the file: sealink up PATH)"
        );
    }
}
