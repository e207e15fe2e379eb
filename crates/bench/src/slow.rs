//! Slow connections: N clients request a file and then read nothing, so
//! their socket buffers fill and the server holds their queued blocks. The
//! figure is server memory per connection beyond the cache budget.

use crate::{BenchError, BenchOptions, Report, Row, io_err, make_file, procs::ServerProc};
use tokio::{io::AsyncWriteExt, net::TcpStream};

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    // Each connection needs a descriptor here and one in the server.
    let want = (2 * opts.clients + 1024) as u64;
    let (soft, hard) = rlimit::Resource::NOFILE.get().map_err(io_err("reading the open-file limit"))?;
    if soft < want {
        rlimit::Resource::NOFILE.set(want.min(hard), hard).map_err(io_err("raising the open-file limit"))?;
    }
    if want > hard {
        return Err(BenchError::Setup(format!(
            "open-file limit {hard} is below the {want} this run needs: raise `ulimit -Hn`"
        )));
    }
    let root = opts.work.join("slow");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    make_file(&root.join("slow.bin"), opts.file_size, opts.seed)?;
    let server = ServerProc::circus(
        &opts.circus,
        &root,
        &["--cache".into(), opts.cache.to_string(), "--max-connections".into(), (opts.clients + 100).to_string()],
    )?;
    let baseline = server.rss_bytes();
    let mut conns = Vec::with_capacity(opts.clients);
    for i in 0..opts.clients {
        let mut c = TcpStream::connect(&server.addr).await.map_err(io_err("connecting"))?;
        let accept = if i % 2 == 0 { circus_proto::CONTENT_TYPE } else { "*/*" };
        let req = format!("GET /slow.bin HTTP/1.1\r\nHost: bench\r\nAccept: {accept}\r\n\r\n");
        c.write_all(req.as_bytes()).await.map_err(io_err("requesting"))?;
        conns.push(c);
        if (i + 1) % 1000 == 0 {
            log(&format!("  {} connections open", i + 1));
        }
    }
    // Let every connection fill its socket buffers and queue.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let status: serde_json::Value =
        serde_json::from_str(&server.get_text("/status")?).map_err(|e| BenchError::Setup(e.to_string()))?;
    let used = status["scheduler"]["used_bytes"].as_f64().unwrap_or(f64::NAN);
    let active: usize = status["scheduler"]["files"]
        .as_array()
        .map(|fs| fs.iter().map(|f| f["clients"].as_array().map_or(0, Vec::len)).sum())
        .unwrap_or(0);
    let rss = server.rss_bytes();
    let per_conn = rss.saturating_sub(baseline + opts.cache) as f64 / opts.clients as f64;
    // Plain downloads that stop reading while holding blocks past the
    // detached-memory cap are cut (their connections closed), so fewer
    // downloads than connections may remain: memory per download still
    // held is the stricter figure.
    let per_active = rss.saturating_sub(baseline + opts.cache) as f64 / active.max(1) as f64;
    drop(conns);
    let row = Row::new("circus")
        .with("connections", opts.clients as f64)
        .with("active_downloads", active as f64)
        .with("rss_bytes", rss as f64)
        .with("baseline_rss_bytes", baseline as f64)
        .with("cache_used_bytes", used)
        .with("rss_per_connection_beyond_cache", per_conn)
        .with("rss_per_active_download_beyond_cache", per_active);
    Ok(Report {
        scenario: "slow".into(),
        setup: format!(
            "{} connections that request a {} byte file and read nothing; cache {} bytes",
            opts.clients, opts.file_size, opts.cache
        ),
        verdict: format!(
            "{:.1} KiB per connection beyond the cache budget (target <= 64 KiB: {}); {:.1} KiB per download still active \
             ({active} of {}: the others stopped reading past the detached-memory cap and were cut); cache holds {:.1} MiB of {:.1} MiB",
            per_conn / 1024.0,
            if per_conn <= 65536.0 { "met" } else { "NOT met" },
            per_active / 1024.0,
            opts.clients,
            used / 1048576.0,
            opts.cache as f64 / 1048576.0
        ),
        rows: vec![row],
    })
}
