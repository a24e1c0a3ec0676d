//! One side's identity: where its host key, its owner key and its trust file are (each at the
//! path a command names, else in [`home`](crate::home::home)), and reading them.

use std::path::PathBuf;

use sealink_crypto::sign::OwnerSigningKey;
use sealink_proto::HostKey;

use crate::error::KeyFileError;
use crate::home::{self, or_home};
use crate::keyfile::{self, KeyKind};
use crate::trust::{self, TrustFile};

/// The files of one side's identity; `None` is the file of that name in `$SEALINK_HOME`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// This host's private key [default: `$SEALINK_HOME/host.key`].
    pub host_key: Option<PathBuf>,
    /// This owner's private key [default: `$SEALINK_HOME/owner.key`].
    pub owner_key: Option<PathBuf>,
    /// The trust file [default: `$SEALINK_HOME/trust`].
    pub trust: Option<PathBuf>,
}

impl Identity {
    /// Where the host's private key is.
    pub fn host_key_path(&self) -> PathBuf {
        or_home(self.host_key.clone(), home::HOST_KEY)
    }

    /// Where the owner's private key is.
    pub fn owner_key_path(&self) -> PathBuf {
        or_home(self.owner_key.clone(), home::OWNER_KEY)
    }

    /// Where the trust file is.
    pub fn trust_path(&self) -> PathBuf {
        or_home(self.trust.clone(), home::TRUST)
    }

    /// The host's key, read with the checks of [`keyfile::read_host_key`].
    pub fn host(&self) -> Result<HostKey, KeyFileError> {
        keyfile::read_host_key(&self.host_key_path())
    }

    /// The owner's signing key, read with the checks of [`keyfile::read_private`].
    pub fn owner(&self) -> Result<OwnerSigningKey, KeyFileError> {
        let seed = keyfile::read_private(&self.owner_key_path(), KeyKind::Owner)?;
        OwnerSigningKey::from_seed(&seed).map_err(|_| KeyFileError::InvalidKey {
            what: KeyKind::Owner.describe(true),
        })
    }

    /// The trust file, read with the checks of [`trust::read_trust`], and its path.
    pub fn read_trust(&self) -> Result<(PathBuf, TrustFile), KeyFileError> {
        let path = self.trust_path();
        let t = trust::read_trust(&path)?;
        Ok((path, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_files_win_over_the_home() {
        let id = Identity {
            host_key: Some("/k/h".into()),
            owner_key: None,
            trust: Some("/k/t".into()),
        };
        assert_eq!(id.host_key_path(), PathBuf::from("/k/h"));
        assert_eq!(id.trust_path(), PathBuf::from("/k/t"));
        assert!(id.owner_key_path().ends_with(home::OWNER_KEY));
    }
}
