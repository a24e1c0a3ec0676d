//! Which AEAD library a [`PacketKey`](crate::PacketKey) runs on, chosen per suite and per CPU.
//!
//! Three libraries of the field are compiled in; they give byte-identical output (same suites,
//! same layout), so the choice is about speed only, and it follows measurements recorded in
//! docs/RESULTS.md (§41 for ChaCha20-Poly1305, §12 for AES-GCM):
//! * **AES-GCM**: aws-lc-rs where the CPU has VAES-AVX512 (its wide path), ring where it has VAES
//!   with AVX2 only (ring's VAES-AVX2 path, which aws-lc-rs lacks: 1.6-1.8x there), else
//!   aws-lc-rs.
//! * **ChaCha20-Poly1305**: where the CPU has AVX-512 F and VL, [`Backend::BySize`]: OpenSSL's
//!   libcrypto for bodies of [`OPENSSL_FROM`] bytes and more, aws-lc-rs below. OpenSSL carries
//!   AVX-512 code for both ChaCha20 and Poly1305 (aws-lc-rs and ring stop at AVX2) and seals a
//!   16 KiB record 1.7-1.9x faster; but through its EVP interface each message costs about
//!   300 ns more (a Poly1305 set-up, a ChaCha20 call for the Poly1305 key and another for a
//!   length that is not a multiple of 64), so at 64-1424 B, tunnel packets, it is 0.5-0.9x
//!   aws-lc-rs. Elsewhere all three run the same AVX2 assembly, and the AES-GCM choice is kept.
//!
//! [`BACKEND_ENV`] overrides the choice for every suite.

use crate::SuiteId;

/// The AEAD libraries behind [`PacketKey`](crate::PacketKey)'s modern suites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// aws-lc-rs (AWS-LC): AES-GCM on AES-NI + PCLMULQDQ, and VAES + VPCLMULQDQ with AVX-512;
    /// ChaCha20-Poly1305 up to AVX2.
    AwsLc,
    /// ring (BoringSSL's assembly): AES-GCM on AES-NI + PCLMULQDQ, and VAES + VPCLMULQDQ with
    /// AVX2 (no AVX-512 path); ChaCha20-Poly1305 up to AVX2.
    Ring,
    /// OpenSSL's libcrypto (the system's libssl3, through the `openssl` crate): ChaCha20 and
    /// Poly1305 with AVX-512.
    OpenSsl,
    /// Each packet on the faster library for its size: aws-lc-rs below [`OPENSSL_FROM`] bytes
    /// of body, OpenSSL from there on.
    BySize,
}

/// Bodies (plaintext, or authenticated data in [`Scope::AuthOnly`](crate::Scope)) of at least
/// this many bytes go to OpenSSL under [`Backend::BySize`]. Measured on an AMD EPYC with AVX-512
/// (docs/RESULTS.md §41): OpenSSL seals 2 KiB 1.14x aws-lc-rs, 16 KiB 1.9x, but 1400-1424 B
/// only 0.74-0.86x.
pub const OPENSSL_FROM: usize = 2048;

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 4] = [
        Backend::AwsLc,
        Backend::Ring,
        Backend::OpenSsl,
        Backend::BySize,
    ];

    /// The library's crate name: "aws-lc-rs", "ring" or "openssl" (what [`BACKEND_ENV`] takes),
    /// or "aws-lc-rs+openssl" for [`Backend::BySize`].
    pub fn name(self) -> &'static str {
        match self {
            Backend::AwsLc => "aws-lc-rs",
            Backend::Ring => "ring",
            Backend::OpenSsl => "openssl",
            Backend::BySize => "aws-lc-rs+openssl",
        }
    }
    /// Parses a [`name`](Self::name) (ASCII case-insensitively, surrounding blanks ignored);
    /// "aws-lc" and "awslc" are taken for aws-lc-rs too, "libcrypto" for openssl.
    pub fn from_name(name: &str) -> Option<Self> {
        let name = name.trim();
        let is = |names: &[&str]| names.iter().any(|n| name.eq_ignore_ascii_case(n));
        if is(&["ring"]) {
            Some(Backend::Ring)
        } else if is(&["aws-lc-rs", "aws-lc", "awslc"]) {
            Some(Backend::AwsLc)
        } else if is(&["openssl", "libcrypto"]) {
            Some(Backend::OpenSsl)
        } else if is(&["aws-lc-rs+openssl", "by-size"]) {
            Some(Backend::BySize)
        } else {
            None
        }
    }
    /// The library's own version, as it reports it at run time where it does (OpenSSL's
    /// `OpenSSL 3.0.19 27 Jan 2026`: the shared library actually loaded); the crates' names
    /// otherwise (aws-lc-rs and ring are linked statically, their version is the build's).
    pub fn library_version(self) -> &'static str {
        match self {
            Backend::AwsLc => "aws-lc-rs (static)",
            Backend::Ring => "ring (static)",
            Backend::OpenSsl | Backend::BySize => openssl::version::version(),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Environment variable that overrides the CPU-based choice of [`chosen_backend`] for every
/// suite: `ring`, `aws-lc-rs`, `openssl` or `aws-lc-rs+openssl` (read once per process; an
/// empty value counts as unset, any other value is ignored and the reason says so).
pub const BACKEND_ENV: &str = "SEALINK_AEAD_BACKEND";

/// The two families of AEAD suites, which the libraries accelerate differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    AesGcm,
    ChaCha,
}

impl Family {
    fn of(suite: SuiteId) -> Self {
        if suite == SuiteId::ChaCha20Poly1305 {
            Family::ChaCha
        } else {
            Family::AesGcm
        }
    }
}

/// The backend [`PacketKey::new`](crate::PacketKey::new) uses for `suite`, and why: decided once
/// per process from [`BACKEND_ENV`] if set, else from the CPU's features (module docs). Legacy
/// suites get the AES-GCM answer, which they ignore.
pub fn chosen_backend(suite: SuiteId) -> (Backend, &'static str) {
    static CHOICE: std::sync::OnceLock<[(Backend, String); 2]> = std::sync::OnceLock::new();
    let choices = CHOICE.get_or_init(|| {
        let env = std::env::var_os(BACKEND_ENV);
        let features = cpu_features();
        [Family::AesGcm, Family::ChaCha].map(|f| decide(env.as_deref(), cpu_choice(f, features)))
    });
    let (backend, why) = &choices[Family::of(suite) as usize];
    (*backend, why.as_str())
}

/// One line per suite family: the backend each runs on and why, and OpenSSL's version where it
/// is used (for `sealink --version -v`, `show` and the benches).
pub fn report() -> String {
    let mut lines = Vec::new();
    for (label, suite) in [
        ("aes-gcm", SuiteId::Aes128Gcm),
        ("chacha20-poly1305", SuiteId::ChaCha20Poly1305),
    ] {
        let (b, why) = chosen_backend(suite);
        let version = match b {
            Backend::OpenSsl | Backend::BySize => format!(", {}", b.library_version()),
            Backend::AwsLc | Backend::Ring => String::new(),
        };
        lines.push(format!("{label}: {b} ({why}{version})"));
    }
    lines.join("\n")
}

/// The features that decide the backend (x86_64).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct CpuFeatures {
    avx2: bool,
    /// AVX512F, AVX512BW, AVX512DQ and AVX512VL, all usable (OS saves the state): what AWS-LC
    /// requires for its VAES-AVX512 AES-GCM.
    avx512: bool,
    /// AVX512F and AVX512VL: what OpenSSL's ChaCha20 (`ChaCha20_ctr32_avx512vl`) and Poly1305
    /// (`poly1305_blocks_avx512`) check for.
    avx512_f_vl: bool,
    vaes: bool,
    vpclmulqdq: bool,
}

/// This CPU's features; `None` off x86_64.
fn cpu_features() -> Option<CpuFeatures> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let f_vl = has!("avx512f") && has!("avx512vl");
        Some(CpuFeatures {
            avx2: has!("avx2"),
            avx512: f_vl && has!("avx512bw") && has!("avx512dq"),
            avx512_f_vl: f_vl,
            vaes: has!("vaes"),
            vpclmulqdq: has!("vpclmulqdq"),
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// The backend for a suite family on these CPU features (`None`: not x86_64), and why.
fn cpu_choice(family: Family, f: Option<CpuFeatures>) -> (Backend, &'static str) {
    let Some(f) = f else {
        return (Backend::AwsLc, "not x86_64: the default");
    };
    if family == Family::ChaCha && f.avx512_f_vl {
        return (
            Backend::BySize,
            "AVX-512: OpenSSL's ChaCha20 and Poly1305 from 2048 B, aws-lc-rs below",
        );
    }
    let wide = f.vaes && f.vpclmulqdq;
    match family {
        Family::AesGcm if wide && f.avx512 => (Backend::AwsLc, "VAES-AVX512 path"),
        Family::AesGcm if wide && f.avx2 => {
            (Backend::Ring, "VAES-AVX2 path, which aws-lc-rs lacks")
        }
        Family::AesGcm => (Backend::AwsLc, "no VAES+VPCLMULQDQ: the default"),
        // Without AVX-512 the three run the same AVX2 code (a tie, RESULTS §12): keep the
        // library AES-GCM runs on, so one library serves the process.
        Family::ChaCha => match cpu_choice(Family::AesGcm, Some(f)).0 {
            Backend::Ring => (Backend::Ring, "no AVX-512: a tie, ring as for AES-GCM"),
            _ => (
                Backend::AwsLc,
                "no AVX-512: a tie, aws-lc-rs as for AES-GCM",
            ),
        },
    }
}

/// Applies the [`BACKEND_ENV`] override (`env`) to the CPU's choice.
fn decide(env: Option<&std::ffi::OsStr>, cpu: (Backend, &'static str)) -> (Backend, String) {
    let (cpu_backend, cpu_why) = cpu;
    match env {
        None => (cpu_backend, cpu_why.to_owned()),
        Some(v) if v.is_empty() => (cpu_backend, cpu_why.to_owned()),
        Some(v) => match v.to_str().and_then(Backend::from_name) {
            Some(b) => (
                b,
                format!("set by {BACKEND_ENV}; the CPU check alone picks {cpu_backend}: {cpu_why}"),
            ),
            None => (
                cpu_backend,
                format!(
                    "{BACKEND_ENV}={v:?} ignored (not ring, aws-lc-rs, openssl or aws-lc-rs+openssl); {cpu_why}",
                    v = v.to_string_lossy()
                ),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: CpuFeatures = CpuFeatures {
        avx2: false,
        avx512: false,
        avx512_f_vl: false,
        vaes: false,
        vpclmulqdq: false,
    };
    const VAES_AVX2: CpuFeatures = CpuFeatures {
        avx2: true,
        avx512: false,
        avx512_f_vl: false,
        vaes: true,
        vpclmulqdq: true,
    };
    const VAES_AVX512: CpuFeatures = CpuFeatures {
        avx512: true,
        avx512_f_vl: true,
        ..VAES_AVX2
    };

    #[test]
    fn aes_gcm_choice_follows_the_features() {
        let aes = |f| cpu_choice(Family::AesGcm, f);
        assert_eq!(aes(Some(VAES_AVX512)), (Backend::AwsLc, "VAES-AVX512 path"));
        assert_eq!(
            aes(Some(VAES_AVX2)),
            (Backend::Ring, "VAES-AVX2 path, which aws-lc-rs lacks")
        );
        // VAES without VPCLMULQDQ (or without AVX2) has no wide path in either library.
        for f in [
            NONE,
            CpuFeatures {
                vpclmulqdq: false,
                ..VAES_AVX2
            },
            CpuFeatures {
                vaes: false,
                ..VAES_AVX512
            },
            CpuFeatures {
                avx2: false,
                ..VAES_AVX2
            },
        ] {
            assert_eq!(aes(Some(f)).0, Backend::AwsLc, "{f:?}");
        }
        assert_eq!(aes(None).0, Backend::AwsLc);
    }

    #[test]
    fn chacha_goes_to_openssl_only_with_avx512() {
        let chacha = |f| cpu_choice(Family::ChaCha, f).0;
        assert_eq!(chacha(Some(VAES_AVX512)), Backend::BySize);
        // AVX-512 F+VL without VAES (Skylake-X, Cascade Lake) still has OpenSSL's paths.
        assert_eq!(
            chacha(Some(CpuFeatures {
                vaes: false,
                vpclmulqdq: false,
                ..VAES_AVX512
            })),
            Backend::BySize
        );
        assert_eq!(chacha(Some(VAES_AVX2)), Backend::Ring);
        assert_eq!(chacha(Some(NONE)), Backend::AwsLc);
        assert_eq!(chacha(None), Backend::AwsLc);
    }

    #[test]
    fn env_override() {
        use std::ffi::OsStr;
        let cpu = cpu_choice(Family::AesGcm, Some(VAES_AVX2));
        assert_eq!(decide(None, cpu), (Backend::Ring, cpu.1.to_owned()));
        assert_eq!(
            decide(Some(OsStr::new("")), cpu),
            (Backend::Ring, cpu.1.to_owned())
        );
        for (v, b) in [
            ("aws-lc-rs", Backend::AwsLc),
            ("AWS-LC", Backend::AwsLc),
            (" ring ", Backend::Ring),
            ("OpenSSL", Backend::OpenSsl),
            ("aws-lc-rs+OpenSSL", Backend::BySize),
        ] {
            let (got, why) = decide(Some(OsStr::new(v)), cpu);
            assert_eq!(got, b, "{v}");
            assert!(why.starts_with("set by SEALINK_AEAD_BACKEND"), "{why}");
            assert!(why.contains(cpu.1), "{why}");
        }
        let (got, why) = decide(Some(OsStr::new("boringssl")), cpu);
        assert_eq!(got, Backend::Ring);
        assert!(why.contains("\"boringssl\" ignored"), "{why}");
        assert!(why.ends_with(cpu.1), "{why}");
    }

    #[test]
    fn backend_names_round_trip() {
        for b in Backend::ALL {
            assert_eq!(Backend::from_name(b.name()), Some(b));
            assert_eq!(b.to_string(), b.name());
        }
        assert_eq!(Backend::from_name("boringssl"), None);
    }

    #[test]
    fn report_names_both_families() {
        let r = report();
        assert!(r.starts_with("aes-gcm: "), "{r}");
        assert!(r.contains("\nchacha20-poly1305: "), "{r}");
        if chosen_backend(SuiteId::ChaCha20Poly1305).0 == Backend::BySize {
            assert!(r.contains("OpenSSL "), "{r}");
        }
    }
}
