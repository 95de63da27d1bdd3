//! `POST /rights` bodies (postcard `RightsMessage`) between shard nodes, decoded as
//! `shard_node::rights::serve::answer_message` does. A pushed description is checked as
//! `hold_description` checks it and its bounds shared out; an ask is answered with the rights
//! arithmetic the commit loop runs (`engine/commit/rights.rs`) for a few bounds, values and
//! ledgers, the giver's transfer taken in by the asker, and the answer re-encoded.

use crate::{NOW_MS, description, round_trip};
use geocount_model::rights::portion;
use geocount_model::{
    Bound, Bounds, CounterType, HlcTimestamp, RightsAnswer, RightsLedger, RightsMessage, Room,
    SlotId,
};

/// How many datacenters the shares are split over.
const DATACENTERS: [usize; 5] = [1, 2, 3, 7, 10];

/// The bounds an ask is answered under: a fixture description's, one-sided ones and the
/// extremes.
fn bounds() -> Vec<Bounds> {
    let mut fixture = description("q", CounterType::Sum, 1).description;
    fixture.min = Some(-10);
    fixture.max = Some(1_000);
    let described = fixture.bounds().expect("a bounded fixture");
    vec![
        described,
        Bounds {
            min: None,
            max: Some(5),
        },
        Bounds {
            min: Some(-3),
            max: None,
        },
        Bounds {
            min: Some(0),
            max: Some(0),
        },
        Bounds {
            min: Some(i64::MIN),
            max: Some(i64::MAX),
        },
    ]
}

/// The answering slot's ledger: empty, or having given to and received from other slots.
fn ledgers() -> [RightsLedger; 2] {
    let mut traded = RightsLedger::default();
    traded.give(&SlotId::new("B", 0), Room { up: 4, down: 1 });
    traded.receive(&SlotId::new("A", 1), Room { up: 2, down: 7 });
    [RightsLedger::default(), traded]
}

/// Checks that the shares of `bounds` over each number of datacenters sum to its room.
fn check_shares(bounds: &Bounds) {
    let room = bounds.room();
    for n in DATACENTERS {
        let shares: Vec<Room> = (0..n).map(|i| bounds.share(n, i)).collect();
        let sum = |up: bool| -> u128 {
            (shares.iter())
                .map(|s| u128::from(if up { s.up } else { s.down }))
                .sum()
        };
        assert_eq!(sum(true), u128::from(room.up), "up-shares sum to the room");
        assert_eq!(sum(false), u128::from(room.down), "down-shares sum to it");
    }
}

/// The sums of a ledger's `received` totals, each direction.
fn received(ledger: &RightsLedger) -> (u128, u128) {
    (ledger.received.iter()).fold((0, 0), |(up, down), (_, room)| {
        (up + u128::from(room.up), down + u128::from(room.down))
    })
}

/// Checks that `passed` refuses exactly the deltas `available` does not hold.
fn check_passed(bounds: &Bounds, share: Room, ledger: &RightsLedger, value: i64, need: Room) {
    let (up, down) = bounds.available(share, ledger, value);
    let wide = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    for delta in [1, -1, wide(need.up), -wide(need.down), i64::MAX, i64::MIN] {
        let passed = bounds.passed(share, ledger, value, delta);
        let delta = i128::from(delta);
        let expected = if delta > 0 && up.is_some_and(|up| up < delta) {
            Some(Bound::Max)
        } else if delta < 0 && down.is_some_and(|down| down < -delta) {
            Some(Bound::Min)
        } else {
            None
        };
        assert_eq!(
            passed, expected,
            "a write passes a bound it lacks rights for"
        );
        if let Some(bound) = passed {
            let _ = bounds.limit(bound);
        }
    }
}

/// Answers an ask under `bounds` as the slot `index` of two holding `value` with `ledger`,
/// then takes the transfer in as the asker does.
fn answer(
    bounds: &Bounds,
    generation: HlcTimestamp,
    to: &SlotId,
    need: Room,
    want: Room,
    value: i64,
    mut ledger: RightsLedger,
) {
    let share = bounds.share(2, 0);
    check_passed(bounds, share, &ledger, value, need);
    let (up, down) = bounds.available(share, &ledger, value);
    let given = Room {
        up: portion(up, need.up, want.up),
        down: portion(down, need.down, want.down),
    };
    assert!(
        up.is_none_or(|up| i128::from(given.up) <= up.max(0)),
        "a slot gives no more than it holds"
    );
    assert!(down.is_none_or(|down| i128::from(given.down) <= down.max(0)));
    let before = ledger.given_to(to);
    let total = ledger.give(to, given);
    assert!(total.up >= before.up && total.down >= before.down);
    let (after_up, after_down) = bounds.available(share, &ledger, value);
    let spent = |after: Option<i128>, was: Option<i128>, now: u64, then: u64| {
        if let (Some(after), Some(was)) = (after, was) {
            assert_eq!(after, was - i128::from(now - then), "giving spends rights");
        }
    };
    spent(after_up, up, total.up, before.up);
    spent(after_down, down, total.down, before.down);
    check_passed(bounds, share, &ledger, value, need);

    let reply = RightsAnswer::new(generation, total, (after_up, after_down));
    round_trip(&reply);
    let narrowed = |wide: Option<i128>, narrow: Option<i64>| {
        assert_eq!(
            wide.is_some(),
            narrow.is_some(),
            "an answer keeps its bounds"
        );
        if let (Some(wide), Some(narrow)) = (wide, narrow) {
            assert_eq!(
                i128::from(narrow),
                wide.clamp(i64::MIN.into(), i64::MAX.into())
            );
        }
    };
    narrowed(after_up, reply.up);
    narrowed(after_down, reply.down);

    // The asker takes in the giver's total, in any order and more than once.
    let giver = SlotId::new("A", 0);
    let mut asker = ledgers()[1].clone();
    for total in [reply.given, before, reply.given, Room::default()] {
        let was = (asker.received_from(&giver), received(&asker));
        asker.receive(&giver, total);
        let now = (asker.received_from(&giver), received(&asker));
        assert!(
            now.0.up >= was.0.up && now.0.down >= was.0.down,
            "totals only rise"
        );
        assert!(
            now.1.0 >= was.1.0 && now.1.1 >= was.1.1,
            "a ledger's totals only rise"
        );
        assert!(now.0.up >= total.up && now.0.down >= total.down);
    }
    assert!(
        !asker.receive(&giver, reply.given),
        "a total taken in changes nothing again"
    );
    let _ = bounds.available(bounds.share(2, 1), &asker, value.saturating_neg());
    let _ = asker.held_bytes();
}

/// Runs one input through the target; whether it decoded.
pub fn run(data: &[u8]) -> bool {
    let Ok(message) = postcard::from_bytes::<RightsMessage>(data) else {
        return false;
    };
    round_trip(&message);
    match message {
        RightsMessage::Describe(pushed) => {
            // A description that fails its check is refused before any table holds it.
            if pushed.description.check().is_ok()
                && let Some(bounds) = pushed.description.bounds()
            {
                bounds
                    .check(pushed.description.id.as_str())
                    .expect("a checked description's bounds are valid");
                check_shares(&bounds);
                let _ = bounds.clamp(i64::MAX);
                let _ = bounds.clamp_wide(i128::MIN);
            }
            let _ = pushed.is_live(NOW_MS);
            let _ = description("q", CounterType::Sum, 1).is_older_than(&pushed);
        }
        RightsMessage::Ask {
            generation,
            to,
            need,
            want,
            ..
        } => {
            let _ = to.to_string();
            for bounds in bounds() {
                check_shares(&bounds);
                for ledger in ledgers() {
                    for value in [0, 3, -2, i64::MAX, i64::MIN] {
                        answer(&bounds, generation, &to, need, want, value, ledger.clone());
                    }
                }
            }
        }
    }
    true
}
