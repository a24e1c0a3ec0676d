//! SHA-256 (aws-lc-rs), whole or incremental: stream mode's content identity of a file.

/// Length of a SHA-256 digest.
pub const SHA256_LEN: usize = 32;

/// An incremental SHA-256.
#[derive(Clone)]
pub struct Sha256(aws_lc_rs::digest::Context);

impl std::fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sha256")
    }
}

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}

impl Sha256 {
    pub fn new() -> Self {
        Self(aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256))
    }
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }
    pub fn finish(self) -> [u8; SHA256_LEN] {
        let d = self.0.finish();
        let mut out = [0u8; SHA256_LEN];
        out.copy_from_slice(d.as_ref());
        out
    }
}

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; SHA256_LEN] {
    let mut h = Sha256::new();
    h.update(data);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer_and_incremental_agree() {
        // FIPS 180-2, "abc".
        assert_eq!(
            sha256(b"abc"),
            hex_literal::hex!("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        let mut h = Sha256::new();
        h.update(b"a");
        h.update(b"");
        h.update(b"bc");
        assert_eq!(h.finish(), sha256(b"abc"));
    }
}
