//! Public-key rows of paper 001's Table 1 (RSA, modular Diffie-Hellman, X25519, P-256,
//! Ed25519), and section 2's precomputation claim: fixed-base against variable-base scalar
//! multiplication.

use super::*;

/// The RFC 3526 group 14 modulus in Montgomery parameters.
pub(super) fn modp_2048_params() -> MontyParams<{ U2048::LIMBS }> {
    let p = U2048::from_be_hex(MODP_2048_HEX);
    let odd = Option::<Odd<U2048>>::from(Odd::new(p)).expect("the RFC 3526 prime is odd");
    MontyParams::new(odd)
}

/// `base^exp mod p` in constant-time Montgomery form (the exponent's full width is processed).
pub(super) fn modp_pow<const L: usize>(
    params: MontyParams<{ U2048::LIMBS }>,
    base: &U2048,
    exp: &crypto_bigint::Uint<L>,
) -> U2048 {
    MontyForm::new(base, params).pow(exp).retrieve()
}

/// A random public value g^x mod p of the group, for one run's peer.
pub(super) fn modp_peer_public(params: MontyParams<{ U2048::LIMBS }>) -> Result<U2048> {
    let x = U256::from_be_slice(&random_array::<32>()?);
    Ok(modp_pow(params, &U2048::from_u64(2), &x))
}
/// The RSA-2048 and finite-field Diffie-Hellman rows.
pub(super) fn measure_rsa_dh(
    t: Timing,
    pb: &indicatif::ProgressBar,
    rows: &mut Vec<Row>,
) -> Result<()> {
    // --- RSA ---------------------------------------------------------------------------------
    let rng = lc_rand::SystemRandom::new();
    let pair = rsa::KeyPair::generate(rsa::KeySize::Rsa2048)
        .map_err(|_| Error::bench("RSA-2048 key generation failed"))?;
    pb.inc(1);
    let public = signature::KeyPair::public_key(&pair).as_ref().to_vec();
    let sig_len = pair.public_modulus_len();
    let sign_rate = ops(t, pb, || {
        let m: [u8; 32] = random_array()?;
        let mut sig = vec![0u8; sig_len];
        let (pair, rng) = (&pair, &rng);
        Ok(move || {
            pair.sign(&signature::RSA_PKCS1_SHA256, rng, &m, &mut sig)
                .map_err(|_| "RSA sign failed")?;
            black_box(&sig);
            Ok(())
        })
    })?;
    rows.push(Row {
        name: "RSA-2048 sign",
        detail: "PKCS#1 v1.5, SHA-256 of a 32-byte message (aws-lc-rs)".into(),
        unit: Unit::PerSec,
        value: sign_rate,
        paper: Some(Paper {
            value: 20.0,
            text: "RSA Signature 20 signatures/sec (modulus size not stated)",
        }),
    });
    let verify_rate = ops(t, pb, || {
        let m: [u8; 32] = random_array()?;
        let mut sig = vec![0u8; sig_len];
        pair.sign(&signature::RSA_PKCS1_SHA256, &rng, &m, &mut sig)
            .map_err(|_| Error::bench("RSA sign failed"))?;
        let key =
            signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, &public);
        Ok(move || {
            key.verify(&m, &sig).map_err(|_| "RSA verify failed")?;
            Ok(())
        })
    })?;
    rows.push(Row {
        name: "RSA-2048 verify",
        detail: "PKCS#1 v1.5 SHA-256, e = 65537, public key parsed per verify (aws-lc-rs)".into(),
        unit: Unit::PerSec,
        value: verify_rate,
        paper: None,
    });
    rows.push(Row {
        name: "RSA-2048 private-key op",
        detail: "derived, not measured separately: sign/s x 2048 bits of modulus".into(),
        unit: Unit::Kbps,
        value: sign_rate * 2048.0 / 1e3,
        paper: Some(Paper {
            value: 10.0,
            text: "RSA Crypt-Decrypt 10 Kbits/sec",
        }),
    });

    // --- Finite-field Diffie-Hellman (benchmark of the exponentiation only) -------------------
    let params = modp_2048_params();
    let dh_paper = Some(Paper {
        value: 5.0,
        text: "Diffie-Hellman Key Exchange 5 keys/sec (512-bit prime)",
    });
    let v = ops(t, pb, || {
        let peer = modp_peer_public(params)?;
        let x = U256::from_be_slice(&random_array::<32>()?);
        Ok(move || {
            black_box(modp_pow(params, &peer, &x));
            Ok(())
        })
    })?;
    rows.push(Row {
        name: "DH-2048 agreement, 256-bit exponent",
        detail: "peer^x mod p, RFC 3526 group 14, random 256-bit x, constant-time Montgomery pow (crypto-bigint); key generation not included".into(),
        unit: Unit::PerSec,
        value: v,
        paper: dh_paper,
    });
    let v = ops(t, pb, || {
        let peer = modp_peer_public(params)?;
        let x = U2048::from_be_slice(&random_array::<256>()?);
        Ok(move || {
            black_box(modp_pow(params, &peer, &x));
            Ok(())
        })
    })?;
    rows.push(Row {
        name: "DH-2048 agreement, 2048-bit exponent",
        detail: "as above with a random full-size (2048-bit) exponent".into(),
        unit: Unit::PerSec,
        value: v,
        paper: dh_paper,
    });

    Ok(())
}

/// The X25519 and Ed25519 rows.
pub(super) fn measure_ecc(
    t: Timing,
    pb: &indicatif::ProgressBar,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let rng = lc_rand::SystemRandom::new();
    // --- X25519 ------------------------------------------------------------------------------
    let peer_public = |rng: &lc_rand::SystemRandom| -> Result<Vec<u8>> {
        let k = agreement::EphemeralPrivateKey::generate(&agreement::X25519, rng)
            .map_err(|_| Error::bench("X25519 key generation failed"))?;
        let pk = k
            .compute_public_key()
            .map_err(|_| Error::bench("X25519 public key failed"))?;
        Ok(pk.as_ref().to_vec())
    };
    let v = ops(t, pb, || {
        let peer = peer_public(&rng)?;
        let mine = agreement::PrivateKey::generate(&agreement::X25519)
            .map_err(|_| Error::bench("X25519 key generation failed"))?;
        Ok(move || {
            let peer = agreement::UnparsedPublicKey::new(&agreement::X25519, &peer);
            agreement::agree(&mine, peer, "X25519 agreement failed", |k| {
                black_box(k);
                Ok(())
            })
        })
    })?;
    rows.push(Row {
        name: "X25519 agreement",
        detail: "one scalar multiplication with a fixed private key; key generation not included (aws-lc-rs)".into(),
        unit: Unit::PerSec,
        value: v,
        paper: None,
    });
    let v = ops(t, pb, || {
        let peer = peer_public(&rng)?;
        let rng = &rng;
        Ok(move || {
            let mine = agreement::EphemeralPrivateKey::generate(&agreement::X25519, rng)
                .map_err(|_| "X25519 key generation failed")?;
            black_box(
                mine.compute_public_key()
                    .map_err(|_| "X25519 public key failed")?,
            );
            let peer = agreement::UnparsedPublicKey::new(&agreement::X25519, &peer);
            agreement::agree_ephemeral(mine, peer, "X25519 agreement failed", |k| {
                black_box(k);
                Ok(())
            })
        })
    })?;
    rows.push(Row {
        name: "X25519 ephemeral exchange",
        detail: "one side: ephemeral key generation + public key + agreement (aws-lc-rs)".into(),
        unit: Unit::PerSec,
        value: v,
        paper: None,
    });

    // --- Ed25519 -----------------------------------------------------------------------------
    let ed = sealink_crypto::sign::OwnerSigningKey::from_seed(&random_array()?)?;
    let v = ops(t, pb, || {
        let m: [u8; 32] = random_array()?;
        let ed = &ed;
        Ok(move || {
            black_box(ed.sign(&m));
            Ok(())
        })
    })?;
    rows.push(Row {
        name: "Ed25519 sign",
        detail: "32-byte message (aws-lc-rs via sealink_crypto::sign)".into(),
        unit: Unit::PerSec,
        value: v,
        paper: None,
    });
    let v = ops(t, pb, || {
        let m: [u8; 32] = random_array()?;
        let sig = ed.sign(&m);
        let pk = ed.public_key();
        Ok(move || {
            if sealink_crypto::sign::verify(&pk, &m, &sig) {
                Ok(())
            } else {
                Err("Ed25519 verify failed")
            }
        })
    })?;
    rows.push(Row {
        name: "Ed25519 verify",
        detail: "32-byte message (aws-lc-rs via sealink_crypto::sign)".into(),
        unit: Unit::PerSec,
        value: v,
        paper: None,
    });
    Ok(())
}

/// Paper 001, section 2: "A further increase in performance (about a factor of 2.5) can be
/// achieved by precomputing a table of generator powers [Brickell, Gordon, McCurley, Wilson
/// 1993]. The resulting table size is small (in the low kilobytes)", for Diffie-Hellman over an
/// elliptic curve on GF(2^155).
pub(super) const PAPER_PRECOMP: Paper = Paper {
    value: 2.5,
    text: "~2.5 (EC DH over GF(2^155), precomputed generator powers, sec. 2)",
};

/// One curve's fixed-base and variable-base scalar multiplication rates.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Precomp {
    pub(super) curve: &'static str,
    /// CSV names of the fixed-base, variable-base and ratio rows.
    pub(super) names: [&'static str; 3],
    /// ops/s of priv x G with the library's precomputed table of generator multiples.
    pub(super) fixed: f64,
    /// ops/s of priv x P for a peer's point P, which no table can cover.
    pub(super) variable: f64,
    pub(super) table: &'static str,
}

impl Precomp {
    pub(super) fn ratio(&self) -> f64 {
        self.fixed / self.variable
    }
    /// One side's whole exchange, made of one fixed-base multiplication (its own public value)
    /// and one variable-base one (the shared secret), against two variable-base ones.
    pub(super) fn exchange_ratio(&self) -> f64 {
        2.0 / self.variable / (1.0 / self.fixed + 1.0 / self.variable)
    }
}

/// Paper 001's elliptic-curve claim measured with aws-lc-rs: fixed-base scalar multiplication
/// (the generator, with the library's precomputed tables) against variable-base (a peer's
/// point), for X25519 and P-256.
///
/// Where the match with the paper is loose:
/// - the curve: the paper's is over the binary field GF(2^155); aws-lc-rs has only prime-field
///   curves (binary curves are measured through OpenSSL by bench/ecc-binary.sh);
/// - the table: the paper's (Brickell et al.) is "in the low kilobytes"; aws-lc's are not:
///   P-256 on x86-64/aarch64 uses nistz256's 37 x 64 affine points (~148 KiB), X25519 the
///   precomputed basepoint multiples of s2n-bignum's x25519base (or of the Ed25519 comb
///   without s2n-bignum), tens of KiB;
/// - "without precomputation" is the library's variable-base path, itself tuned otherwise
///   (X25519: Montgomery ladder; P-256: a window of 16 points built per call), not the
///   fixed-base algorithm minus its table;
/// - each timed call is an API call: fixed = parse the private scalar and compute its public
///   point (`PrivateKey::from_private_key`; `compute_public_key` only serializes a point
///   computed at key creation, so it cannot be the measure); variable = parse and check the
///   peer's point and compute the shared secret (`agreement::agree`);
/// - a whole exchange has one multiplication of each kind, so precomputation can at most
///   halve its time: the paper's 2.5 can only describe the generator exponentiation, and it is
///   compared with our fixed / variable ratio; the exchange-level ratio is printed beside it.
pub(super) fn measure_precomp(t: Timing, pb: &indicatif::ProgressBar) -> Result<Vec<Precomp>> {
    type Curve = (
        &'static str,
        [&'static str; 3],
        &'static agreement::Algorithm,
        &'static str,
    );
    let curves: [Curve; 2] = [
        (
            "X25519",
            [
                "X25519 fixed-base (precomputed table)",
                "X25519 variable-base",
                "X25519 fixed / variable",
            ],
            &agreement::X25519,
            "s2n-bignum x25519base basepoint table (Ed25519 comb without s2n-bignum) vs Montgomery ladder",
        ),
        (
            "P-256",
            [
                "P-256 fixed-base (precomputed table)",
                "P-256 variable-base",
                "P-256 fixed / variable",
            ],
            &agreement::ECDH_P256,
            "nistz256 table of 37 x 64 affine points on x86-64 vs a per-call window",
        ),
    ];
    let mut out = Vec::new();
    for (curve, names, alg, table) in curves {
        // A private scalar: for P-256 below the group order (top bit cleared) and not zero.
        let scalar = || -> Result<[u8; 32]> {
            let mut b = random_array::<32>()?;
            b[0] &= 0x7f;
            b[31] |= 1;
            Ok(b)
        };
        let fixed = ops(t, pb, || {
            let b = scalar()?;
            Ok(move || {
                let k = agreement::PrivateKey::from_private_key(alg, &b)
                    .map_err(|_| "private key rejected")?;
                black_box(k);
                Ok(())
            })
        })?;
        let variable = ops(t, pb, || {
            let mine = agreement::PrivateKey::from_private_key(alg, &scalar()?)
                .map_err(|_| Error::bench(format!("{curve} private key rejected")))?;
            let peer = agreement::PrivateKey::from_private_key(alg, &scalar()?)
                .map_err(|_| Error::bench(format!("{curve} private key rejected")))?
                .compute_public_key()
                .map_err(|_| Error::bench(format!("{curve} public key failed")))?
                .as_ref()
                .to_vec();
            Ok(move || {
                let peer = agreement::UnparsedPublicKey::new(alg, &peer);
                agreement::agree(&mine, peer, "agreement failed", |k| {
                    black_box(k);
                    Ok(())
                })
            })
        })?;
        out.push(Precomp {
            curve,
            names,
            fixed,
            variable,
            table,
        });
    }
    Ok(out)
}

/// The precomputation table as printed: both rates, our ratios and the paper's.
pub(super) fn precomp_table(rows: &[Precomp]) -> Table {
    let mut t = Table::new([
        "curve",
        "fixed base, precomputed (ops/s)",
        "variable base (ops/s)",
        "fixed / variable",
        "paper 1995",
        "ours / paper",
        "one side's exchange: 2 t_var / (t_fixed + t_var)",
    ])
    .left(&[4]);
    for r in rows {
        t.row([
            r.curve.to_owned(),
            crate::report::fmt_sig(r.fixed),
            crate::report::fmt_sig(r.variable),
            format!("{:.2}x", r.ratio()),
            PAPER_PRECOMP.text.to_owned(),
            format!("{:.2}", r.ratio() / PAPER_PRECOMP.value),
            format!("{:.2}x", r.exchange_ratio()),
        ]);
    }
    t
}

/// The precomputation figures as CSV rows (rates, then the ratio against the paper's 2.5).
pub(super) fn precomp_rows(rows: &[Precomp]) -> Vec<Row> {
    let mut out = Vec::new();
    for r in rows {
        let [fixed, variable, ratio] = r.names;
        out.push(Row {
            name: fixed,
            detail: format!(
                "PrivateKey::from_private_key: priv x G (tables: {})",
                r.table
            ),
            unit: Unit::PerSec,
            value: r.fixed,
            paper: None,
        });
        out.push(Row {
            name: variable,
            detail: "agreement::agree: priv x peer point, peer point parsed and checked".into(),
            unit: Unit::PerSec,
            value: r.variable,
            paper: None,
        });
        out.push(Row {
            name: ratio,
            detail: format!(
                "ratio of the two rates; one side's exchange: {:.3}x",
                r.exchange_ratio()
            ),
            unit: Unit::Ratio,
            value: r.ratio(),
            paper: Some(PAPER_PRECOMP),
        });
    }
    out
}
