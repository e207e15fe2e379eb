//! Scheduler invariants over long random event sequences (some clients
//! asking for in-order delivery):
//! every client receives every block of its file exactly once or fails with
//! a reason; resident bytes never exceed the budget (pinned blocks count); no
//! client is left with nothing in flight; the same events give the same
//! actions. The model driver in `common` checks each action as it happens.

mod common;

use circus_core::{BlockSet, ClientId};
use circus_sched::{Action, Favor, PolicyKind, SchedConfig};
use common::Driver;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Debug, Clone)]
struct Params {
    policy: PolicyKind,
    favor: Favor,
    seed: u64,
    cache_blocks: u64,
    queue: u32,
    active_blocks: u64,
    threshold: f64,
    leapfront: f64,
    readahead: u32,
    files: u64,
    fail_reads: bool,
    /// File lengths are drawn from this range.
    lens: std::ops::Range<u64>,
}

fn params() -> impl Strategy<Value = Params> {
    (
        prop_oneof![Just(PolicyKind::Circus), Just(PolicyKind::Sequential)],
        prop_oneof![Just(Favor::Speed), Just(Favor::Storage)],
        any::<u64>(),
        2u64..40,
        1u32..6,
        1u64..20,
        0.0f64..=1.0,
        1.0f64..3.0,
        1u32..4,
        1u64..4,
        any::<bool>(),
    )
        .prop_map(
            |(
                policy,
                favor,
                seed,
                cache_blocks,
                queue,
                active_blocks,
                threshold,
                leapfront,
                readahead,
                files,
                fail_reads,
            )| {
                Params {
                    policy,
                    favor,
                    seed,
                    cache_blocks,
                    queue,
                    active_blocks,
                    threshold,
                    leapfront,
                    readahead,
                    files,
                    fail_reads,
                    lens: 0..40_000,
                }
            },
        )
}

const BLOCK: u32 = 1000;

/// Drives a random workload: joins (some resuming) of files of random
/// length including empty and short-last-block files, leaves at any moment,
/// reads and sends completed in random order, some reads failing.
fn run(p: &Params, steps: usize) -> Driver {
    let cfg = SchedConfig {
        policy: p.policy,
        block_size: BLOCK,
        queue_len: p.queue,
        cache_bytes: p.cache_blocks * u64::from(BLOCK),
        active_len: p.active_blocks * u64::from(BLOCK),
        threshold: p.threshold,
        leapfront: p.leapfront,
        readahead: p.readahead,
        favor: p.favor,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    let lens: Vec<u64> = (0..p.files).map(|_| rng.random_range(p.lens.clone())).collect();
    let mut d = Driver::new(cfg);
    let mut next_client = 0;
    for _ in 0..steps {
        d.now += rng.random_range(0..1_000_000);
        match rng.random_range(0..100) {
            0..4 => {
                let f = rng.random_range(0..p.files);
                let len = lens[f as usize];
                let have = rng.random_bool(0.3).then(|| {
                    let n = len.div_ceil(u64::from(BLOCK)) as u32;
                    let mut h = BlockSet::new(n);
                    (0..n).filter(|_| rng.random_bool(0.5)).for_each(|b| _ = h.insert(b));
                    h
                });
                d.in_order_joins = rng.random_bool(0.2);
                d.join(next_client, f, len, have);
                next_client += 1;
            }
            4 => {
                let active: Vec<ClientId> = d.active().collect();
                if !active.is_empty() {
                    d.leave(active[rng.random_range(0..active.len())]);
                }
            }
            5..45 if !d.pending_reads.is_empty() => {
                let i = rng.random_range(0..d.pending_reads.len());
                d.finish_read(i, p.fail_reads && rng.random_bool(0.02));
            }
            45..47 => {
                let active: Vec<ClientId> = d.active().filter(|c| !d.parked.contains(c)).collect();
                if !active.is_empty() {
                    d.park(active[rng.random_range(0..active.len())], rng.random_range(0..3));
                }
            }
            47..50 if !d.parked.is_empty() => {
                let parked: Vec<ClientId> = d.parked.iter().copied().collect();
                d.resume(parked[rng.random_range(0..parked.len())]);
            }
            _ if !d.sendable().is_empty() => {
                let sendable = d.sendable();
                d.finish_send(sendable[rng.random_range(0..sendable.len())]);
            }
            _ => d.event(circus_sched::Event::Tick),
        }
        d.assert_no_starvation();
    }
    d.drain();
    d
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_client_gets_every_block_once_or_fails(p in params()) {
        let d = run(&p, 3000);
        // The driver checked each send was new and resident, each eviction
        // unpinned, and the budget after every event. At the end every
        // client is accounted for.
        for c in d.client_file.keys() {
            let outcome = d.completed.contains(c) as u8 + d.failed.contains_key(c) as u8 + d.left.contains(c) as u8;
            prop_assert!(outcome >= 1, "{c} neither completed, failed nor left");
            if let Some(reason) = d.failed.get(c) {
                prop_assert!(!reason.to_string().is_empty());
            }
        }
        prop_assert_eq!(d.s.active_clients(), 0);
        if !p.fail_reads {
            prop_assert!(d.failed.is_empty(), "failures without injected faults: {:?}", d.failed);
        }
    }

    #[test]
    fn same_events_same_actions(p in params()) {
        let a = run(&p, 800);
        let b = run(&p, 800);
        prop_assert_eq!(a.log, b.log);
    }
}

/// A long sequence at the paper's shape: one file, many clients, a budget
/// far below the file size.
#[test]
fn long_run_circus_shares_reads() {
    let p = Params {
        policy: PolicyKind::Circus,
        favor: Favor::Speed,
        seed: 7,
        cache_blocks: 16,
        queue: 5,
        active_blocks: 8,
        threshold: 0.75,
        leapfront: 1.0,
        readahead: 1,
        files: 1,
        fail_reads: false,
        lens: 60_000..100_000,
    };
    let d = run(&p, 40_000);
    assert!(d.completed.len() > 20, "only {} completed", d.completed.len());
    let evictions = d.log.iter().filter(|a| matches!(a, Action::Evict { .. })).count();
    assert!(evictions > 0, "budget never pressed");
    println!("seed {} reads {} sends {} ratio {:.3}", p.seed, d.reads, d.sends, d.reads as f64 / d.sends as f64);
}
