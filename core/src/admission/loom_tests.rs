use super::*;
use crate::sync::{Arc, AtomicU32};

fn gate(max: u32, max_queue: u32) -> Arc<Gate> {
    let params = GateParams::new(max, Some(max_queue), Duration::from_secs(1)).expect("valid");
    Arc::new(Gate::new(params))
}

/// Run a request that holds a slot, then leave; run every waiter the slot is handed to.
fn run(gate: &Gate, holders: &AtomicU32, handed: &AtomicU32) {
    let mut next = Some(());
    while next.take().is_some() {
        let now_holding = holders.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(now_holding <= 1, "{now_holding} requests in flight, max 1");
        assert!(gate.in_flight() <= 1);
        holders.fetch_sub(1, Ordering::SeqCst);
        if let Some(id) = gate.leave(Instant::ZERO) {
            // Woken waiter: settle its ticket (it owns the slot now) and run it here.
            assert_eq!(gate.cancel(id, Instant::ZERO), Cancel::AlreadyAdmitted);
            handed.fetch_add(1, Ordering::SeqCst);
            next = Some(());
        }
    }
}

/// C-LOAD-1: three requests enter and leave a gate of one slot concurrently. Never two in
/// flight; a request that queued is always handed the slot (no lost wake-up); the gate ends
/// empty.
#[test]
fn loom_gate_never_over_admits() {
    loom::model(|| {
        let gate = gate(1, 2);
        let holders = Arc::new(AtomicU32::new(0));
        let handed = Arc::new(AtomicU32::new(0));
        let queued = Arc::new(AtomicU32::new(0));
        let task = {
            let (gate, holders, handed, queued) = (
                Arc::clone(&gate),
                Arc::clone(&holders),
                Arc::clone(&handed),
                Arc::clone(&queued),
            );
            move || match gate.enter(Instant::ZERO) {
                Entry::Admitted => run(&gate, &holders, &handed),
                Entry::Queued(_) => {
                    queued.fetch_add(1, Ordering::SeqCst);
                }
                Entry::Rejected(r) => panic!("rejected with room in the queue: {r:?}"),
            }
        };
        let t1 = loom::thread::spawn(task.clone());
        let t2 = loom::thread::spawn(task.clone());
        task();
        t1.join().expect("no panic");
        t2.join().expect("no panic");
        assert_eq!(
            handed.load(Ordering::SeqCst),
            queued.load(Ordering::SeqCst),
            "every waiter was handed a slot"
        );
        assert_eq!(gate.in_flight(), 0);
        assert_eq!(gate.queued(), 0);
        assert_eq!(gate.poll_timeout(), None);
    });
}

/// C-LOAD-1: a waiter's cancel races the leave that would hand it the slot. Exactly one wins:
/// either the waiter left the queue and the slot was freed, or it owns the slot.
#[test]
fn loom_gate_cancel_races_hand_off() {
    loom::model(|| {
        let gate = gate(1, 1);
        assert_eq!(gate.enter(Instant::ZERO), Entry::Admitted);
        let Entry::Queued(ticket) = gate.enter(Instant::ZERO) else {
            panic!("a full gate with queue room queues");
        };
        let leaver = {
            let gate = Arc::clone(&gate);
            loom::thread::spawn(move || gate.leave(Instant::ZERO))
        };
        let cancelled = gate.cancel(ticket.id, Instant::ZERO);
        let handed = leaver.join().expect("no panic");
        match cancelled {
            Cancel::Removed => {
                assert_eq!(handed, None);
                assert_eq!(gate.in_flight(), 0);
            }
            Cancel::AlreadyAdmitted => {
                assert_eq!(handed, Some(ticket.id));
                assert_eq!(gate.in_flight(), 1);
                assert_eq!(gate.leave(Instant::ZERO), None);
                assert_eq!(gate.in_flight(), 0);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(gate.queued(), 0);
    });
}
