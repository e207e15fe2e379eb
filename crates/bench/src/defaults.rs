//! circus at its defaults against nginx as operators run it (workers per
//! core, sendfile, tcp_nopush, open_file_cache, access log off), in clear,
//! on resident objects from 1 KiB to a large file, driven by load
//! generators that are not ours: wrk over HTTP/1.1 keep-alive and with a
//! new connection per request, h2load over h2 (prior knowledge, 100
//! streams per connection), curl for concurrent whole downloads. The one
//! flag circus gets is a `--cache` large enough to hold every object, as
//! nginx's page cache does.

use crate::{
    BenchError, BenchOptions, Report,
    external::{self, Endpoint},
    io_err, make_file,
    procs::ServerProc,
    versus::{self, Contender, Drive, Load},
};

/// The objects, by name and size.
const OBJECTS: [(&str, u64); 5] =
    [("1k.bin", 1 << 10), ("10k.bin", 10 << 10), ("100k.bin", 100 << 10), ("1m.bin", 1 << 20), ("16m.bin", 16 << 20)];

/// Each load with its target ratio.
fn loads(opts: &BenchOptions) -> Vec<Load> {
    let mut loads = Vec::new();
    let target = |size: u64| match size {
        s if s <= 1 << 10 => 2.0,
        s if s < 1 << 20 => 1.5,
        _ => 1.2,
    };
    let label = |object: &str| object.trim_end_matches(".bin").to_uppercase().replace('K', "KiB").replace('M', "MiB");
    for (object, size) in OBJECTS {
        let conns = if size >= 1 << 20 { 16 } else { 64 };
        loads.push(Load {
            name: format!("{} keep-alive (wrk, {conns} conns)", label(object)),
            drive: Drive::Wrk { object, conns, close: false },
            size,
            target: target(size),
        });
    }
    for (object, size) in [OBJECTS[0], OBJECTS[2]] {
        loads.push(Load {
            name: format!("{} new conn per request (wrk, 64 conns)", label(object)),
            drive: Drive::Wrk { object, conns: 64, close: true },
            size,
            target: 1.0,
        });
    }
    for (object, size) in [OBJECTS[0], OBJECTS[2], OBJECTS[3]] {
        loads.push(Load {
            name: format!("{} h2, 100 streams (h2load, 16 conns)", label(object)),
            drive: Drive::H2 { object, conns: 16, streams: 100 },
            size,
            target: target(size),
        });
    }
    loads.push(Load {
        name: format!("{} curl downloads of the large file", opts.clients),
        drive: Drive::Downloads { object: "big.bin", clients: opts.clients },
        size: opts.file_size,
        target: 1.2,
    });
    loads
}

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    external::require(&["wrk", "h2load", "curl"])?;
    let root = opts.work.join("defaults");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    for (object, size) in OBJECTS {
        make_file(&root.join(object), size, opts.seed)?;
    }
    make_file(&root.join("big.bin"), opts.file_size, opts.seed)?;
    let total: u64 = OBJECTS.iter().map(|(_, s)| s).sum::<u64>() + opts.file_size;
    let cache = (total / 15 * 16 + (64 << 20)).max(opts.cache);
    let mut args = vec!["--cache".to_string(), cache.to_string()];
    args.extend(opts.server_args.iter().cloned());
    let circus = ServerProc::circus(&opts.circus, &root, &args)?;
    let (nginx, h2c) = ServerProc::nginx_with_h2c(&root, &opts.work)?;
    let circus = Contender::one_port(&circus, None);
    let nginx = Contender {
        server: &nginx,
        h1: Endpoint { base: format!("http://{}", nginx.addr), tls: None },
        h2: Endpoint { base: format!("http://{h2c}"), tls: None },
    };
    log("warming up: every object read once by each server");
    for c in [&circus, &nginx] {
        external::downloads(&c.h1, &c.server.name, "big.bin", 1, opts.file_size).await?;
        for (object, _) in OBJECTS {
            external::wrk(&c.h1, &c.server.name, object, 4, 1.0, false)?;
        }
    }
    let loads = loads(opts);
    let outcome = versus::alternate(&circus, &nginx, &loads, opts.rounds, opts.seconds, log).await?;
    let plot = opts.work.join("defaults.svg");
    crate::versus_plot::write(&loads, &outcome.figures, "circus vs nginx at the defaults", &plot)?;
    log(&format!("plot: {}", plot.display()));
    let cpu = if outcome.cpu_worse.is_empty() {
        "server CPU per byte <= nginx's at every load".to_string()
    } else {
        let worse: Vec<String> = outcome
            .cpu_worse
            .iter()
            .map(|w| format!("{}: {:.2} of nginx's, {:.2} with the clients' CPU", w.load, w.server, w.with_clients))
            .collect();
        format!("server CPU per byte above nginx's at: {}", worse.join("; "))
    };
    Ok(Report {
        scenario: "defaults".into(),
        setup: format!(
            "in clear; nginx {} workers, sendfile, tcp_nopush, open_file_cache, access log off; circus defaults + --cache {cache}; \
             wrk -t2 / h2load -t2 {} s per load, {} curl downloads of {} bytes; median of {} alternating rounds",
            crate::procs::nginx_workers(),
            opts.seconds,
            opts.clients,
            opts.file_size,
            opts.rounds,
        ),
        verdict: format!("circus / nginx: {}; {cpu}", outcome.verdicts.join("; ")),
        rows: outcome.rows,
    })
}
