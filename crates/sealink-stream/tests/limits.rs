//! The key-usage limit of a stream session, enforced on both sides with a small injected
//! value: the receiver refuses a hello that announces more data records than the limit, the
//! sender refuses to start such a transfer, and stops reading standard input at the limit.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use sealink_crypto::sign::OwnerSigningKey;
use sealink_crypto::{Scope, SuiteId};
use sealink_proto::HostKey;
use sealink_proto::stream::{StreamError, StreamLimits};
use sealink_stream::{
    Dest, Progress, Receiver, RecvConfig, RecvReport, SendConfig, Source, TransferError,
};

const RECORD: usize = 512;
const LIMIT: u64 = 10;

struct Keys {
    sender_host: [u8; 32],
    receiver_host: [u8; 32],
    owner_seed: [u8; 32],
}

impl Keys {
    fn new() -> Self {
        let random = || {
            let mut k = [0u8; 32];
            sealink_crypto::sign::random_bytes(&mut k).unwrap();
            k
        };
        Keys {
            sender_host: random(),
            receiver_host: random(),
            owner_seed: OwnerSigningKey::generate_seed().unwrap(),
        }
    }
    fn from_env() -> Self {
        let get = |k: &str| -> [u8; 32] {
            let v = std::env::var(k).unwrap();
            (0..32)
                .map(|i| u8::from_str_radix(&v[2 * i..2 * i + 2], 16).unwrap())
                .collect::<Vec<_>>()
                .try_into()
                .unwrap()
        };
        Keys {
            sender_host: get("T_SENDER_HOST"),
            receiver_host: get("T_RECEIVER_HOST"),
            owner_seed: get("T_OWNER"),
        }
    }
    fn to_env(&self, c: &mut Command) {
        let hex = |k: &[u8; 32]| k.iter().map(|b| format!("{b:02x}")).collect::<String>();
        c.env("T_SENDER_HOST", hex(&self.sender_host))
            .env("T_RECEIVER_HOST", hex(&self.receiver_host))
            .env("T_OWNER", hex(&self.owner_seed));
    }
    fn host(k: &[u8; 32]) -> HostKey {
        HostKey::from_private(*k).unwrap()
    }
    fn owner(&self) -> OwnerSigningKey {
        OwnerSigningKey::from_seed(&self.owner_seed).unwrap()
    }
}

/// A receiver serving one session in the background; join the handle for its outcome.
fn receiver(
    keys: &Keys,
    dest: &Path,
    limits: StreamLimits,
) -> (
    SocketAddr,
    std::thread::JoinHandle<Result<RecvReport, String>>,
) {
    let r = Receiver::bind(
        "127.0.0.1:0".parse().unwrap(),
        RecvConfig {
            trusted_hosts: vec![("a".into(), *Keys::host(&keys.sender_host).public())],
            trusted_owners: vec![("o".into(), keys.owner().public_key())],
            session_limits: limits,
            ..RecvConfig::new(Keys::host(&keys.receiver_host), Dest::Dir(dest.to_owned()))
        },
    )
    .unwrap();
    let addr = r.local_addr();
    let h = std::thread::spawn(move || {
        let mut out = None;
        let _ = r.serve(true, Arc::new(Progress::default()), |rep| {
            out = Some(match rep {
                Ok(r) => Ok(r.clone()),
                Err(e) => Err(e.to_string()),
            });
        });
        out.unwrap()
    });
    (addr, h)
}

fn send_cfg(keys: &Keys, key_data_records: Option<u64>) -> SendConfig {
    SendConfig {
        host: Keys::host(&keys.sender_host),
        peer: *Keys::host(&keys.receiver_host).public(),
        owner: keys.owner(),
        suite: SuiteId::Aes128Gcm,
        scope: Scope::Encrypt,
        streams: 2,
        record_data: RECORD,
        batch_data: 4 * RECORD,
        timeouts: Default::default(),
        key_data_records,
        resume: true,
        exclude: Vec::new(),
        update: false,
        rate_limit: None,
        copy_links: false,
        delete: false,
        list_entries: true,
    }
}

fn file(d: &Path, name: &str, records: u64) -> Source {
    let path = d.join(name);
    std::fs::write(&path, vec![7u8; records as usize * RECORD - 1]).unwrap();
    Source::File {
        path,
        name: name.into(),
    }
}

#[test]
fn receiver_refuses_more_records_than_its_key_limit() {
    let keys = Keys::new();
    let d = tempfile::tempdir().unwrap();
    let inbox = d.path().join("in");
    std::fs::create_dir_all(&inbox).unwrap();
    let limits = StreamLimits {
        key_data_records: Some(LIMIT),
        ..StreamLimits::default()
    };
    // At the limit: accepted.
    let (addr, h) = receiver(&keys, &inbox, limits);
    let ok = [file(d.path(), "ten", LIMIT)];
    sealink_stream::send(addr, &send_cfg(&keys, None), &ok, &Progress::default()).unwrap();
    assert!(h.join().unwrap().is_ok());
    // One more record (in a second file): refused with the reason, nothing stored.
    let (addr, h) = receiver(&keys, &inbox, limits);
    let over = [file(d.path(), "six", 6), file(d.path(), "five", 5)];
    let e = sealink_stream::send(addr, &send_cfg(&keys, None), &over, &Progress::default())
        .unwrap_err();
    match &e {
        TransferError::Refused(m) => assert!(m.contains("usage limit"), "{m}"),
        other => panic!("{other}"),
    }
    let r = h.join().unwrap().unwrap_err();
    assert!(r.contains("11 records") && r.contains("usage limit"), "{r}");
    let names: Vec<_> = std::fs::read_dir(&inbox)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["ten"]);
}

#[test]
fn sender_refuses_before_connecting_when_files_exceed_its_key_limit() {
    let keys = Keys::new();
    let d = tempfile::tempdir().unwrap();
    // Something listening that must never see a connection.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let over = [file(d.path(), "eleven", LIMIT + 1)];
    let e = sealink_stream::send(
        l.local_addr().unwrap(),
        &send_cfg(&keys, Some(LIMIT)),
        &over,
        &Progress::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            TransferError::Protocol(StreamError::LimitExceeded {
                needed: 11,
                limit: LIMIT,
                ..
            })
        ),
        "{e}"
    );
    assert!(l.accept().is_err(), "the sender connected anyway");
}

/// Run as a child process by the next test (standard input is the process's own): sends its
/// standard input with the small key limit.
#[test]
fn helper_send_stdin_with_small_key_limit() {
    let Ok(addr) = std::env::var("T_SEND_TO") else {
        return;
    };
    let keys = Keys::from_env();
    let r = sealink_stream::send(
        addr.parse().unwrap(),
        &send_cfg(&keys, Some(LIMIT)),
        &[Source::Stdin {
            name: "piped".into(),
        }],
        &Progress::default(),
    );
    let e = r.expect_err("the sender went past its key limit");
    println!("SENDER ERROR: {e}");
}

#[test]
fn sender_stops_standard_input_at_its_key_limit() {
    let keys = Keys::new();
    let d = tempfile::tempdir().unwrap();
    // The receiver allows far more: only the sender's limit can stop this.
    let (addr, h) = receiver(&keys, d.path(), StreamLimits::default());
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "helper_send_stdin_with_small_key_limit",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("T_SEND_TO", addr.to_string())
    .stdin(Stdio::piped())
    .stdout(Stdio::piped());
    keys.to_env(&mut c);
    let mut child = c.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    // 40 records' worth: the sender must stop after 10.
    let _ = input.write_all(&vec![1u8; 40 * RECORD]);
    drop(input);
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("SENDER ERROR") && out.contains("usage limit"),
        "{out}"
    );
    let r = h.join().unwrap().unwrap_err();
    assert!(
        r.contains("sender aborted") && r.contains("usage limit"),
        "{r}"
    );
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}
