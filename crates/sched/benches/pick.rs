//! Hot path: one `Sent` event and the pick it triggers, with many clients
//! sharing one file's active region (the T1 case of the paper).

use circus_core::{ClientId, FileId};
use circus_sched::{Action, Event, PolicyKind, SchedConfig, Scheduler};
use criterion::{Criterion, criterion_group, criterion_main};
use std::collections::VecDeque;

fn steady_state(policy: PolicyKind, clients: u64) -> (Scheduler, VecDeque<Action>) {
    let mut s = Scheduler::new(SchedConfig { policy, ..SchedConfig::default() });
    let mut pending = VecDeque::new();
    for c in 0..clients {
        pending.extend(s.on_event(
            0,
            Event::Join { client: ClientId(c), file: FileId(1), len: 512 << 20, have: None, in_order: false },
        ));
    }
    (s, pending)
}

/// Completes the oldest pending action and queues what it causes.
fn step(s: &mut Scheduler, pending: &mut VecDeque<Action>, now: u64) {
    let Some(a) = pending.pop_front() else { return };
    let ev = match a {
        Action::Read { file, block } => Event::Loaded { file, block },
        Action::Send { client, block, .. } => Event::Sent { client, block },
        Action::Complete { client } => Event::Join {
            client: ClientId(client.0 + 1_000_000),
            file: FileId(1),
            len: 512 << 20,
            have: None,
            in_order: false,
        },
        _ => return,
    };
    pending.extend(s.on_event(now, ev));
}

fn bench(c: &mut Criterion) {
    for (name, policy) in [("circus", PolicyKind::Circus), ("sequential", PolicyKind::Sequential)] {
        let (mut s, mut pending) = steady_state(policy, 270);
        let mut now = 0;
        c.bench_function(&format!("{name}_event_270_clients"), |b| {
            b.iter(|| {
                now += 1000;
                step(&mut s, &mut pending, now);
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
