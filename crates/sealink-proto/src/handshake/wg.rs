//! WireGuard's handshake (Noise_IKpsk2 with WireGuard's identifier and TAI64N timestamps),
//! used by the tunnel's WireGuard wire ([`crate::tunnel`]) and the handshake state
//! (`super::state`); mac1/mac2 and cookie replies are [`super::cookie`]'s, the messages'
//! layout [`crate::wg::message`]'s.

use std::time::Duration;

use crate::handshake::cookie::CookieGenerator;
use crate::handshake::{HostKey, ZeroCheckingResolver};
use crate::time::Time;
use crate::wg::message::{
    INITIATION_LEN, INITIATION_NOISE, MSG_INITIATION, MSG_RESPONSE, RESPONSE_LEN, RESPONSE_NOISE,
};

/// A handshake message that did not build or decrypt. No detail is kept: none may be told to
/// the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandshakeFailed;

/// WireGuard's Noise protocol name (its CONSTRUCTION).
pub const CONSTRUCTION: &str = "Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";

/// WireGuard's IDENTIFIER, the Noise prologue.
pub const IDENTIFIER: &[u8] = b"WireGuard v1 zx2c4 Jason@zx2c4.com";

/// The preshared key when none is configured.
pub const NO_PSK: [u8; 32] = [0; 32];

/// TAI64N label of the Unix epoch (2^62 + 10 leap seconds), as wireguard-go.
pub(super) const TAI64_EPOCH: u64 = 0x4000_0000_0000_000a;

/// wireguard-go rounds the nanoseconds down to about 16 ms, so that the timestamp does not
/// give away the sender's clock to the nanosecond; we do the same.
pub(super) const NANOS_WHITENER: u32 = 0x100_0000 - 1;

/// The 12-byte TAI64N timestamp of `unix` (time since the Unix epoch): seconds + 2^62 + 10,
/// big-endian, then the (whitened) nanoseconds, big-endian. Later times give byte strings
/// that compare greater.
pub fn tai64n(unix: Duration) -> [u8; 12] {
    let mut t = [0u8; 12];
    t[..8].copy_from_slice(&TAI64_EPOCH.wrapping_add(unix.as_secs()).to_be_bytes());
    t[8..].copy_from_slice(&(unix.subsec_nanos() & !NANOS_WHITENER).to_be_bytes());
    t
}

/// Nanoseconds since the Unix epoch of `unix`, whitened as [`tai64n`] does: the value an
/// initiation's timestamp carries, as a number that orders like the label.
pub fn whitened_nanos(unix: Duration) -> u64 {
    unix.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(unix.subsec_nanos() & !NANOS_WHITENER))
}

/// The TAI64N label of `nanos` nanoseconds since the Unix epoch, exactly (no whitening).
pub fn tai64n_of_nanos(nanos: u64) -> [u8; 12] {
    let mut t = [0u8; 12];
    t[..8].copy_from_slice(
        &TAI64_EPOCH
            .wrapping_add(nanos / 1_000_000_000)
            .to_be_bytes(),
    );
    t[8..].copy_from_slice(&((nanos % 1_000_000_000) as u32).to_be_bytes());
    t
}

/// Nanoseconds since the Unix epoch of a TAI64N label (saturating; a label before the epoch
/// or with more than 10^9 nanoseconds orders as its parts do).
pub fn tai64n_nanos(t: &[u8; 12]) -> u64 {
    let secs = u64::from_be_bytes([t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]]);
    let nanos = u32::from_be_bytes([t[8], t[9], t[10], t[11]]);
    secs.saturating_sub(TAI64_EPOCH)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(nanos))
}

/// The two transport keys a finished handshake gives one side.
pub(crate) struct TransportKeys {
    pub send: [u8; 32],
    pub recv: [u8; 32],
}

pub(crate) fn transport_keys(hs: &mut snow::HandshakeState) -> TransportKeys {
    let (a, b) = hs.dangerously_get_raw_split();
    if hs.is_initiator() {
        TransportKeys { send: a, recv: b }
    } else {
        TransportKeys { send: b, recv: a }
    }
}

pub(crate) fn noise_builder<'a>(
    local: &'a HostKey,
    psk: &'a [u8; 32],
) -> Result<snow::Builder<'a>, snow::Error> {
    noise_builder_with(local, psk, IDENTIFIER)
}

/// [`noise_builder`] with another prologue (the known-answer test's).
pub(crate) fn noise_builder_with<'a>(
    local: &'a HostKey,
    psk: &'a [u8; 32],
    prologue: &'a [u8],
) -> Result<snow::Builder<'a>, snow::Error> {
    snow::Builder::with_resolver(params(), Box::new(ZeroCheckingResolver))
        .local_private_key(&local.private)?
        .psk(2, psk)?
        .prologue(prologue)
}

/// An initiation from `local` to `remote` with sender index `sender` and timestamp `ts`, its
/// macs added by `cookies`; the handshake state that reads the response.
pub(crate) fn write_initiation(
    local: &HostKey,
    remote: &[u8; 32],
    psk: &[u8; 32],
    sender: u32,
    ts: &[u8; 12],
    cookies: &mut CookieGenerator,
    now: Time,
) -> Result<(snow::HandshakeState, [u8; INITIATION_LEN]), String> {
    let (hs, mut msg) = write_initiation_unmacked(local, remote, psk, sender, ts)?;
    cookies.add_macs(now, &mut msg);
    Ok((hs, msg))
}

/// [`write_initiation`] with mac1 and mac2 left zero (the public-key work, which needs no
/// cookie state): the caller adds them.
pub(crate) fn write_initiation_unmacked(
    local: &HostKey,
    remote: &[u8; 32],
    psk: &[u8; 32],
    sender: u32,
    ts: &[u8; 12],
) -> Result<(snow::HandshakeState, [u8; INITIATION_LEN]), String> {
    let err = |e: snow::Error| e.to_string();
    let mut hs = noise_builder(local, psk)
        .and_then(|b| b.remote_public_key(remote))
        .and_then(|b| b.build_initiator())
        .map_err(err)?;
    let mut msg = [0u8; INITIATION_LEN];
    msg[0] = MSG_INITIATION;
    msg[4..8].copy_from_slice(&sender.to_le_bytes());
    let n = hs
        .write_message(ts, &mut msg[INITIATION_NOISE])
        .map_err(err)?;
    if n != INITIATION_NOISE.len() {
        return Err(format!("initiation of {n} bytes"));
    }
    Ok((hs, msg))
}

/// Reads an initiation to `local` (its mac1 already checked): the responder's handshake state
/// (preshared key still zero: set it once the peer is known), the initiator's static key and
/// the timestamp. Any failure is [`HandshakeFailed`].
pub(crate) fn read_initiation(
    local: &HostKey,
    msg: &[u8],
) -> Result<(snow::HandshakeState, [u8; 32], [u8; 12]), HandshakeFailed> {
    let fail = |_| HandshakeFailed;
    let mut hs = noise_builder(local, &NO_PSK)
        .and_then(|b| b.build_responder())
        .map_err(fail)?;
    let noise = msg.get(INITIATION_NOISE).ok_or(HandshakeFailed)?;
    let mut payload = [0u8; 64];
    let n = hs.read_message(noise, &mut payload).map_err(fail)?;
    let ts = payload
        .get(..n)
        .and_then(|t| <[u8; 12]>::try_from(t).ok())
        .ok_or(HandshakeFailed)?;
    let remote = hs
        .get_remote_static()
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
        .ok_or(HandshakeFailed)?;
    Ok((hs, remote, ts))
}

/// The response to a read initiation (sender index `sender` = ours, `receiver` = the
/// initiator's), its macs added by `cookies`; the responder's transport keys. (The tunnel core
/// writes it in two steps, [`write_response_unmacked`] then the MACs; the reference peer of
/// the `reference-peer` feature in one.)
#[cfg_attr(not(feature = "reference-peer"), allow(dead_code))]
pub(crate) fn write_response(
    hs: snow::HandshakeState,
    psk: &[u8; 32],
    sender: u32,
    receiver: u32,
    cookies: &mut CookieGenerator,
    now: Time,
) -> Result<([u8; RESPONSE_LEN], TransportKeys), HandshakeFailed> {
    let (mut resp, keys) = write_response_unmacked(hs, psk, sender, receiver)?;
    cookies.add_macs(now, &mut resp);
    Ok((resp, keys))
}

/// [`write_response`] without its MACs (the caller adds them with the peer's
/// [`CookieGenerator`]): needs no state, so a driver may run it with no lock held.
pub(crate) fn write_response_unmacked(
    mut hs: snow::HandshakeState,
    psk: &[u8; 32],
    sender: u32,
    receiver: u32,
) -> Result<([u8; RESPONSE_LEN], TransportKeys), HandshakeFailed> {
    hs.set_psk(2, psk).map_err(|_| HandshakeFailed)?;
    let mut resp = [0u8; RESPONSE_LEN];
    resp[0] = MSG_RESPONSE;
    resp[4..8].copy_from_slice(&sender.to_le_bytes());
    resp[8..12].copy_from_slice(&receiver.to_le_bytes());
    if hs.write_message(&[], &mut resp[RESPONSE_NOISE]).ok() != Some(RESPONSE_NOISE.len()) {
        return Err(HandshakeFailed);
    }
    Ok((resp, transport_keys(&mut hs)))
}

/// Reads the response to our initiation into `hs`: the initiator's transport keys. A failed
/// read leaves snow's state half-mixed: the caller gives the initiation up.
pub(crate) fn read_response(
    hs: &mut snow::HandshakeState,
    msg: &[u8],
) -> Result<TransportKeys, HandshakeFailed> {
    let noise = msg.get(RESPONSE_NOISE).ok_or(HandshakeFailed)?;
    let mut payload = [0u8; 16];
    match hs.read_message(noise, &mut payload) {
        Ok(0) => Ok(transport_keys(hs)),
        _ => Err(HandshakeFailed),
    }
}

pub(crate) fn params() -> snow::params::NoiseParams {
    // The constant parses (checked by a test); a failure would be a build defect.
    CONSTRUCTION.parse().expect("valid noise params")
}
