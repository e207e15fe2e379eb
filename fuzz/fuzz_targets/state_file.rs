//! The client's resume state file (`PATH.circus-state`, JSON) on untrusted
//! bytes, through `circus_client::fuzzing::FuzzState`.
//!
//! Properties: parsing never panics; an accepted state round-trips (it
//! writes JSON that reads back to the same state, and writes that same
//! JSON again); what it claims is consistent: no more bytes done than the
//! file has, and complete only when every byte is done.

#![no_main]

use circus_client::fuzzing::FuzzState;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(state) = FuzzState::from_json(data) else { return };
    let json = state.to_json();
    let back = FuzzState::from_json(&json).unwrap_or_else(|e| panic!("own output refused: {e}"));
    assert_eq!(back, state);
    assert_eq!(back.to_json(), json);
    if let Some(total) = state.total() {
        assert!(state.done_bytes() <= total, "{} bytes done of {total}", state.done_bytes());
    }
    if state.is_complete() {
        assert_eq!(Some(state.done_bytes()), state.total());
    }
});
