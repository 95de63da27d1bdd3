//! The coordinator's ordering, refusals and gate, driven by hand (no peer behind it).

use std::sync::Mutex as StdMutex;

use super::*;

type Answers = Arc<StdMutex<Vec<(u64, Replicated)>>>;

/// A coordinator of two peers whose senders go nowhere, and the answers it gives.
fn coordinator() -> (
    Coordinator,
    Answers,
    Vec<mpsc::UnboundedReceiver<Arc<Group>>>,
) {
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..2 {
        let (sender, receiver) = mpsc::unbounded_channel();
        senders.push(sender);
        receivers.push(receiver);
    }
    let coordinator = Coordinator {
        peers: vec!["DC_A_VAL_1".into(), "DC_A_VAL_2".into()],
        senders,
        covered: Arc::new(AtomicU64::new(0)),
        made_through: Arc::new(AtomicU64::new(0)),
        refusing: Arc::new(Mutex::new(None)),
        timeout: Duration::from_millis(50),
        next_seq: 1,
        pending: VecDeque::new(),
        failing: vec![None, None],
    };
    (coordinator, Answers::default(), receivers)
}

fn log(coordinator: &mut Coordinator, answers: &Answers, n: u64, payload: bool) {
    let answers = answers.clone();
    coordinator.logged(Logged {
        version: n,
        payload: payload.then(|| vec![n as u8]),
        release: Box::new(move |told| answers.lock().unwrap().push((n, told))),
    });
    coordinator.release_held();
}

fn held(coordinator: &mut Coordinator, peer: usize, seqs: &[u64]) {
    coordinator.report(Report::Held {
        peer,
        seqs: seqs.to_vec(),
    });
    coordinator.release_held();
}

fn answered(answers: &Answers) -> Vec<(u64, bool)> {
    let answers = answers.lock().unwrap();
    (answers.iter())
        .map(|(n, told)| (*n, *told == Replicated::Held))
        .collect()
}

/// A group is answered once it and every earlier one are held by some peer, in order, and
/// each peer is sent every group.
#[tokio::test]
async fn groups_are_answered_in_order_once_some_peer_holds_each() {
    let (mut c, answers, mut receivers) = coordinator();
    for n in 1..=3 {
        log(&mut c, &answers, n, true);
    }
    // Logged nothing: held at once, but answered after the groups before it.
    log(&mut c, &answers, 4, false);
    for receiver in &mut receivers {
        let sent: Vec<u64> = std::iter::from_fn(|| receiver.try_recv().ok())
            .map(|g| g.seq)
            .collect();
        assert_eq!(sent, [1, 2, 3]);
    }
    held(&mut c, 0, &[2, 3]);
    assert_eq!(answered(&answers), []);
    held(&mut c, 1, &[1]);
    let all_ok = [(1, true), (2, true), (3, true), (4, true)];
    assert_eq!(answered(&answers), all_ok);
    assert_eq!(c.covered.load(Ordering::Acquire), 4);
    assert!(c.pending.is_empty());
}

/// Once every peer failed, the waiting groups are refused at once and so is every write
/// after them, until a peer holds the refused group; later groups wait for it.
#[tokio::test]
async fn with_every_peer_failing_writes_are_refused_until_one_holds_the_refused_group() {
    let (mut c, answers, _receivers) = coordinator();
    log(&mut c, &answers, 1, true);
    c.report(Report::Failed {
        peer: 0,
        error: "connection refused".into(),
    });
    assert_eq!(answered(&answers), []);
    c.report(Report::Failed {
        peer: 1,
        error: "connection refused".into(),
    });
    assert_eq!(answered(&answers), [(1, false)]);
    let refusal = c.refusing.lock().unwrap().clone().expect("refusing");
    assert!(
        refusal.contains("DC_A_VAL_2: connection refused"),
        "{refusal}"
    );
    // A group logged meanwhile (a retry answered from a key) waits for the refused one.
    log(&mut c, &answers, 2, false);
    assert_eq!(answered(&answers), [(1, false)]);
    held(&mut c, 1, &[1]);
    // The refused group is told once a peer holds it: then its changes may be shown.
    assert_eq!(answered(&answers), [(1, false), (1, true), (2, true)]);
    assert!(c.refusing.lock().unwrap().is_none());
}

/// A group no peer holds by its deadline is refused; the gate opens once a peer holds it.
#[tokio::test]
async fn a_group_past_its_deadline_is_refused() {
    let (mut c, answers, _receivers) = coordinator();
    log(&mut c, &answers, 1, true);
    tokio::time::sleep(Duration::from_millis(60)).await;
    c.expire();
    assert_eq!(answered(&answers), [(1, false)]);
    let refusal = c.refusing.lock().unwrap().clone().expect("refusing");
    assert!(
        refusal.contains("replication_timeout_ms (50 ms)"),
        "{refusal}"
    );
    held(&mut c, 0, &[1]);
    assert_eq!(answered(&answers), [(1, false), (1, true)]);
    assert!(c.refusing.lock().unwrap().is_none());
    assert!(c.pending.is_empty());
}

/// A batch goes out as postcard encodes a [`HeldBatch`], and reads back as sent.
#[test]
fn a_batch_encodes_as_its_wire_type() {
    let long = vec![7u8; 300];
    let groups: Vec<&[u8]> = vec![&[], &[1], &long, &[0, 255, 128]];
    for groups in [Vec::new(), groups] {
        let batch = HeldBatch {
            incarnation: u64::MAX,
            since_version: 300,
            made_through: 1,
            groups,
        };
        let bytes = encode_batch(&batch).unwrap();
        assert_eq!(bytes, postcard::to_allocvec(&batch).unwrap());
        assert_eq!(postcard::from_bytes::<HeldBatch>(&bytes).unwrap(), batch);
    }
}
