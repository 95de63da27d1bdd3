//! The JSON bodies clients send: `POST /counter`, the single writes of
//! `PATCH /counter/{id}/write` and `POST /counters/{id}/increment` (parsed by the shard node's
//! own functions, then applied to a record), and the WAN emulator's `PUT /links/{name}`.

use crate::{NOW_MS, NOW_SECS, WINDOW_SECONDS, drive_record, sum_record};
use geocount_model::{CounterDescription, ShardDefaults, SlotRecord, next_slot_version};
use geocount_wan::Shaping;
use geocount_wan::control::ShapingChange;
use shard_node::engine::write::Change;
use shard_node::http::requests::{parse_create, parse_write};

/// Runs one input through the target; whether it decoded.
pub fn run(data: &[u8]) -> bool {
    let settings = ShardDefaults::default();
    let mut decoded = false;
    if let Ok(description) = parse_create(data, &settings, NOW_MS) {
        decoded = true;
        assert!(description.number_of_shards >= 1);
        assert!((1..=settings.max_window_seconds).contains(&description.window_seconds));
        // Answered as JSON, read back by clients (geoctl).
        let json = serde_json::to_vec(&description).expect("a description encodes");
        let back: CounterDescription = serde_json::from_slice(&json).expect("and decodes");
        assert_eq!(back, description);
    }
    for (sign, signed) in [(1, false), (-1, false), (1, true)] {
        let Ok(write) = parse_write(data, sign, signed, &settings, NOW_SECS) else {
            continue;
        };
        let (change, timestamp) = (write.change, write.timestamp_secs);
        decoded = true;
        assert!(timestamp <= NOW_SECS + settings.max_future_skew_secs);
        for mut record in [SlotRecord::default(), sum_record(i64::MAX - 1, 3)] {
            let version = next_slot_version(record.state.version, NOW_MS);
            match &change {
                Change::Delta(delta) => {
                    if let Ok(state) = record.state.apply(*delta, version) {
                        if let Some(window) = record.window_mut() {
                            let _ = window.record(timestamp, *delta, WINDOW_SECONDS);
                        }
                        record.state = state;
                    }
                }
                Change::Item { hash, .. } => {
                    record.add_item(*hash, version);
                }
            }
            drive_record(&record);
        }
    }
    if let Ok(change) = ShapingChange::parse(data) {
        decoded = true;
        let _ = change.apply(Shaping::default());
    }
    decoded
}
