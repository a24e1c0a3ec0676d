//! What a pairing does with the peer's two keys, decided before either side writes anything: a
//! name this trust file gives another key refuses the pairing on both hosts (the verdicts,
//! PROTOCOL §14).

use crate::kind::KeyKind;
use crate::trust::TrustFile;

use super::Payload;

/// What to do with one of the peer's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    Add,
    /// Listed under this name with this key already.
    Already,
    /// This key is listed under another name: kept as it is, not listed twice.
    OtherName(String),
}

/// One of the peer's keys, the name it is to be filed under, and what to do with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub kind: KeyKind,
    pub name: String,
    pub key: [u8; 32],
    pub plan: Plan,
}

/// The peer's name for a key is listed in this trust file with another key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} {name} is already listed with another key, so nothing was added. Remove it (`sealink \
     trust remove {name}`) or pair again with the peer choosing another --name",
    kind.trust_keyword()
)]
pub struct NameTaken {
    pub kind: KeyKind,
    pub name: String,
}

/// The plans for the peer's host key and owner key against `current`, this side's trust file.
pub fn plan(theirs: &Payload, current: &TrustFile) -> Result<[Planned; 2], NameTaken> {
    let one = |kind: KeyKind, key: &[u8; 32], list: &[(String, [u8; 32])], name: &String| {
        let plan = if list.iter().any(|(n, k)| n == name && k == key) {
            Plan::Already
        } else if let Some((other, _)) = list.iter().find(|(_, k)| k == key) {
            Plan::OtherName(other.clone())
        } else if list.iter().any(|(n, _)| n == name) {
            return Err(NameTaken {
                kind,
                name: name.clone(),
            });
        } else {
            Plan::Add
        };
        Ok(Planned {
            kind,
            name: name.clone(),
            key: *key,
            plan,
        })
    };
    Ok([
        one(KeyKind::Host, &theirs.host, &current.hosts, &theirs.name)?,
        one(
            KeyKind::Owner,
            &theirs.owner,
            &current.owners,
            &theirs.owner_name,
        )?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys_decide_each_plan() {
        let theirs = Payload {
            name: "b".into(),
            owner_name: "bob".into(),
            host: [1; 32],
            owner: [2; 32],
        };
        let plans = plan(&theirs, &TrustFile::default()).unwrap();
        assert_eq!(plans.map(|p| p.plan), [Plan::Add, Plan::Add]);
        let current = TrustFile {
            hosts: vec![("b".into(), [1; 32])],
            owners: vec![("robert".into(), [2; 32])],
        };
        let plans = plan(&theirs, &current).unwrap();
        assert_eq!(
            plans.map(|p| p.plan),
            [Plan::Already, Plan::OtherName("robert".into())]
        );
        let taken = TrustFile {
            hosts: vec![("b".into(), [9; 32])],
            owners: vec![],
        };
        let e = plan(&theirs, &taken).unwrap_err();
        assert_eq!(
            e.to_string(),
            "host b is already listed with another key, so nothing was added. Remove it \
             (`sealink trust remove b`) or pair again with the peer choosing another --name"
        );
    }
}
