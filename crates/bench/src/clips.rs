//! Lava's video-clip scenario: N clients, each streaming a different clip
//! at a fixed bit rate (1.5 Mbit/s), from one disk. A client is a player
//! ([`Player::CLIP`]): it starts once it holds its prebuffer of video, then
//! plays at the bit rate, reading from its socket only while its buffer
//! holds under its maximum (so the server sees a receiver paced by
//! playback, as from a real player, not a download at full speed). It
//! falls behind if its buffer runs dry while playing, or if it waits too
//! long to start. Clients arrive spread over [`ARRIVALS`].
//!
//! The clips live on the emulated disk of the paper's experiments (5 ms
//! positioning, 50 MB/s; [`crate::fusedisk`]), which every server reads
//! through; nginx's page cache is bounded to circus's `--cache`. N rises
//! step by step, for each server until a step has a client fall behind:
//! the last N with none is the number held.

use crate::{
    BenchError, BenchOptions, Report, Row, disk::DiskParams, fusedisk::DiskMount, io_err, loadgen::parse_head,
    make_file, procs::ServerProc,
};
use rand::{Rng, SeedableRng};
use std::time::Duration;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpSocket,
    time::Instant,
};

/// How a player plays: the bench's players are [`Player::CLIP`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct Player {
    /// Bytes per second of video.
    rate: f64,
    prebuffer: Duration,
    max_buffer: Duration,
    play: Duration,
    startup_limit: Duration,
}

impl Player {
    /// 1.5 Mbit/s; starts with 2 s buffered, holds at most 4 s, plays 20 s,
    /// must start within 10 s.
    const CLIP: Player = Player {
        rate: 1.5e6 / 8.0,
        prebuffer: Duration::from_secs(2),
        max_buffer: Duration::from_secs(4),
        play: Duration::from_secs(20),
        startup_limit: Duration::from_secs(10),
    };

    /// Bytes of video in `d`.
    fn bytes(&self, d: Duration) -> u64 {
        (self.rate * d.as_secs_f64()) as u64
    }
}

const ARRIVALS: Duration = Duration::from_secs(5);
/// Clients per step; the last is past what the disk's media rate allows.
const STEPS: [usize; 10] = [25, 50, 75, 100, 125, 150, 200, 250, 300, 402];

/// Bytes a clip needs: its play time and a full buffer at the end.
fn clip_bytes() -> u64 {
    let p = Player::CLIP;
    p.bytes(p.play + p.max_buffer + Duration::from_secs(2))
}

/// How one player did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Playback {
    /// Waited from its request until it started playing, seconds.
    pub startup_s: f64,
    /// Its buffer ran dry while playing, or it never started in time.
    pub behind: bool,
}

/// Plays `path` from `server` as `p` says: see the module doc.
async fn play(p: Player, server: std::net::SocketAddr, path: &str) -> Result<Playback, BenchError> {
    let fail = |e: std::io::Error| BenchError::Client(format!("{path}: {e}"));
    let socket = TcpSocket::new_v4().map_err(fail)?;
    // A small receive buffer, so the server feels the player's pace.
    socket.set_recv_buffer_size(64 << 10).map_err(fail)?;
    let asked = Instant::now();
    let mut stream = socket.connect(server).await.map_err(fail)?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n").as_bytes()).await.map_err(fail)?;
    let mut buf = vec![0u8; 64 << 10];
    let mut head = Vec::new();
    let (mut body_len, mut received) = (None, 0u64);
    let mut playing_since: Option<Instant> = None;
    let per = |d: Duration| p.bytes(d);
    loop {
        let now = Instant::now();
        let played = playing_since.map_or(0, |t| per(now - t));
        if playing_since.is_some_and(|t| now - t >= p.play) || body_len.is_some_and(|l| received >= l) {
            break;
        }
        let buffered = received.saturating_sub(played);
        if playing_since.is_none() && body_len.is_some() && buffered >= per(p.prebuffer) {
            playing_since = Some(now);
            continue;
        }
        if playing_since.is_some() && buffered >= per(p.max_buffer) {
            // Full: play a quarter of it before reading again.
            tokio::time::sleep(p.max_buffer / 4).await;
            continue;
        }
        // Read until the buffer would run dry, the play ends, or the start
        // is too late.
        let deadline = match playing_since {
            Some(t) => t + Duration::from_secs_f64(received as f64 / p.rate).min(p.play),
            None => asked + p.startup_limit,
        };
        let behind =
            Playback { startup_s: playing_since.map_or(p.startup_limit, |t| t - asked).as_secs_f64(), behind: true };
        let n = match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) if playing_since.is_some_and(|t| Instant::now() - t >= p.play) => break,
            Err(_) => return Ok(behind),
            Ok(r) => r.map_err(fail)?,
        };
        if n == 0 {
            // Closed before the clip was all there: the player stops.
            return Ok(behind);
        }
        if body_len.is_some() {
            received += n as u64;
            continue;
        }
        head.extend_from_slice(&buf[..n]);
        if let Some((status, head_len, len)) = parse_head(&head)? {
            if status != 200 {
                return Err(BenchError::Client(format!("{path}: status {status}")));
            }
            body_len = Some(len as u64);
            received = (head.len() - head_len) as u64;
        }
    }
    let startup = playing_since.map_or(Duration::ZERO, |t| t - asked);
    Ok(Playback { startup_s: startup.as_secs_f64(), behind: false })
}

/// One step: `n` players of clips `0..n`, arriving over [`ARRIVALS`].
async fn step(server: std::net::SocketAddr, n: usize, seed: u64) -> Result<Vec<Playback>, BenchError> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut players = tokio::task::JoinSet::new();
    for i in 0..n {
        let after = ARRIVALS.mul_f64(rng.random::<f64>());
        players.spawn(async move {
            tokio::time::sleep(after).await;
            play(Player::CLIP, server, &format!("/clip-{i:03}")).await
        });
    }
    let mut out = Vec::with_capacity(n);
    while let Some(r) = players.join_next().await {
        out.push(r.map_err(|e| BenchError::Client(format!("player: {e}")))??);
    }
    Ok(out)
}

pub async fn run(opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    if !crate::netem::is_root() {
        return Err(BenchError::Setup("clips needs root (the emulated disk is a FUSE mount)".into()));
    }
    let backing = opts.work.join("clips");
    std::fs::create_dir_all(&backing).map_err(io_err("creating clip dir"))?;
    let last = *STEPS.last().expect("steps");
    log(&format!("writing {last} clips of {} bytes", clip_bytes()));
    for i in 0..last {
        make_file(&backing.join(format!("clip-{i:03}")), clip_bytes(), opts.seed + i as u64)?;
    }
    let params = DiskParams::default();
    let mut rows = Vec::new();
    let mut held = [0usize; 2];
    let mut going = [true; 2];
    for &n in &STEPS {
        for (s, name) in ["circus", "nginx-sendfile"].into_iter().enumerate() {
            if !going[s] {
                continue;
            }
            // A fresh disk per step: empty queue, cold cache.
            let mount = DiskMount::mount(&backing, &opts.work.join("clips-mnt"), params, opts.cache)?;
            let server = if s == 0 {
                let mut args = vec!["--cache".to_string(), opts.cache.to_string()];
                args.extend(opts.server_args.iter().cloned());
                ServerProc::circus(&opts.circus, &mount.mountpoint, &args)?
            } else {
                ServerProc::nginx(&mount.mountpoint, &opts.work, false)?
            };
            let addr = server.addr.parse().map_err(|e| BenchError::Setup(format!("{}: {e}", server.addr)))?;
            let plays = step(addr, n, opts.seed).await?;
            let stats = mount.stats();
            drop(server);
            drop(mount);
            let behind = plays.iter().filter(|p| p.behind).count();
            let mut startups: Vec<f64> = plays.iter().map(|p| p.startup_s).collect();
            startups.sort_by(f64::total_cmp);
            let p95 = startups.get(startups.len() * 95 / 100).copied().unwrap_or(f64::NAN);
            log(&format!(
                "{name}, {n} clips: {behind} behind, startup p95 {p95:.2} s, disk {:.1} MB read in {} reads",
                stats.bytes_read as f64 / 1e6,
                stats.reads
            ));
            rows.push(
                Row::new(name)
                    .with("clients", n as f64)
                    .with("behind", behind as f64)
                    .with("startup_p95_s", p95)
                    .with("disk_bytes_read", stats.bytes_read as f64)
                    .with("disk_reads", stats.reads as f64)
                    .with("disk_busy_s", stats.busy_s),
            );
            if behind == 0 {
                held[s] = n;
            } else {
                going[s] = false;
            }
        }
    }
    let plot_path = opts.work.join("clips.svg");
    plot(&rows, &plot_path)?;
    log(&format!("plot: {}", plot_path.display()));
    let bound = (params.rate / Player::CLIP.rate).floor();
    Ok(Report {
        scenario: "clips".into(),
        setup: format!(
            "players of distinct clips at 1.5 Mbit/s ({:?} prebuffer, {:?} buffer, {:?} of play, arrivals over \
             {ARRIVALS:?}, start within {:?}); clips on the emulated disk (5 ms, 50 MB/s: at \
             most {bound:.0} clips at the media rate); circus --cache {} and nginx (sendfile) with its page cache bounded \
             alike; steps {STEPS:?}",
            Player::CLIP.prebuffer,
            Player::CLIP.max_buffer,
            Player::CLIP.play,
            Player::CLIP.startup_limit,
            opts.cache
        ),
        verdict: format!(
            "clips held with none behind: circus {}, nginx {} (target: circus >= nginx: {})",
            held[0],
            held[1],
            if held[0] >= held[1] { "met" } else { "NOT met" }
        ),
        rows,
    })
}

/// Players behind, and the p95 wait to start, against players, one line
/// per server.
fn plot(rows: &[Row], path: &std::path::Path) -> Result<(), BenchError> {
    use circus_plot::{Chart, Scale, Series};
    let line = |server: &str, figure: &str| {
        let points =
            rows.iter().filter(|r| r.server == server).filter_map(|r| Some((r.get("clients")?, r.get(figure)?)));
        Series::new(server, points.collect::<Vec<_>>())
    };
    let chart = |title: &str, y: &str, figure: &str| Chart {
        title: title.into(),
        x_label: "players of distinct 1.5 Mbit/s clips".into(),
        y_label: y.into(),
        x_scale: Scale::Linear,
        y_from_zero: true,
        series: vec![line("circus", figure), line("nginx-sendfile", figure)],
        ..Chart::default()
    };
    let charts = [
        chart("Players behind", "players behind", "behind"),
        chart("Wait to start", "p95 startup (s)", "startup_p95_s"),
    ];
    circus_plot::write_grid_svg(path, &charts, 2).map_err(|e| BenchError::Setup(format!("plot: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    const QUICK: Player = Player {
        rate: 100_000.0,
        prebuffer: Duration::from_millis(200),
        max_buffer: Duration::from_millis(400),
        play: Duration::from_millis(600),
        startup_limit: Duration::from_millis(500),
    };

    /// A server that sends a 100,000-byte body: `first` bytes at once, then
    /// the rest after `pause`.
    async fn server(first: usize, pause: Duration) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut c, _) = listener.accept().await.unwrap();
            let mut req = [0u8; 1024];
            let _ = c.read(&mut req).await;
            let body = vec![7u8; 100_000];
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n").await;
            let _ = c.write_all(&body[..first]).await;
            tokio::time::sleep(pause).await;
            let _ = c.write_all(&body[first..]).await;
        });
        addr
    }

    #[tokio::test]
    async fn a_player_fed_in_time_plays_through_and_one_starved_falls_behind() {
        let fed = play(QUICK, server(100_000, Duration::ZERO).await, "/clip").await.unwrap();
        assert!(!fed.behind, "{fed:?}");
        // 30,000 bytes start it (20,000 prebuffer) and last 0.3 s; the rest comes after 1 s.
        let starved = play(QUICK, server(30_000, Duration::from_secs(1)).await, "/clip").await.unwrap();
        assert!(starved.behind, "{starved:?}");
        // Never enough to start within the limit.
        let late = play(QUICK, server(10_000, Duration::from_secs(1)).await, "/clip").await.unwrap();
        assert!(late.behind && late.startup_s >= 0.5, "{late:?}");
    }
}
