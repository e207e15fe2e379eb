//! `circus index DIR`: builds the hash index of every file under DIR ahead
//! of serving, so that the first native download of a large file starts at
//! once, and removes the stored indexes of files deleted since.

use anyhow::Context;
use circus_core::ByteSize;
use circus_store::{FileIndex, FileVersion, INDEX_DIR, default_index_dir};
use clap::Args;
use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

#[derive(Debug, Args)]
pub struct IndexArgs {
    /// The directory `circus serve` serves.
    dir: PathBuf,
    /// Where the indexes go (default DIR/.circus/index; give the same
    /// --index-dir to `circus serve`).
    #[arg(long, value_name = "DIR")]
    index_dir: Option<PathBuf>,
    /// The block size `circus serve` uses (default 64KiB).
    #[arg(long)]
    block: Option<ByteSize>,
    /// Index files whose names start with a dot too (as `serve --dotfiles true`).
    #[arg(long)]
    dotfiles: bool,
}

pub fn main(args: IndexArgs) -> anyhow::Result<()> {
    let root = args.dir.canonicalize().with_context(|| format!("cannot index {}", args.dir.display()))?;
    let index_dir = match &args.index_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("--index-dir {}", d.display()))?;
            d.canonicalize()?
        }
        None => default_index_dir(&root),
    };
    let block = match args.block {
        Some(b) => u32::try_from(b.0).ok().filter(|&b| b > 0).context("--block: between 1 byte and 4 GiB")?,
        None => circus_sched::SchedConfig::default().block_size,
    };
    let files = list(&root, &index_dir, args.dotfiles)?;
    let total: u64 = files.iter().map(|(_, size)| size).sum();
    eprintln!("indexing {} files, {} under {}", files.len(), ByteSize(total), root.display());
    let started = Instant::now();
    let (mut built, mut done_before) = (0usize, 0u64);
    let mut last_note = Instant::now();
    for (rel, size) in &files {
        let meta = std::fs::metadata(root.join(rel)).with_context(|| format!("reading {rel}"))?;
        let version = FileVersion::of(&meta);
        if FileIndex::load_stored(&index_dir, rel, version, block).is_none() {
            built += 1;
            FileIndex::load_or_build(&index_dir, &root, rel, version, block, &mut |hashed| {
                if last_note.elapsed() >= Duration::from_secs(2) {
                    last_note = Instant::now();
                    let all = done_before + hashed;
                    let rate = all as f64 / started.elapsed().as_secs_f64() / 1e6;
                    eprintln!(
                        "  {rel}: {:.0}%; all files {:.0}% ({rate:.0} MB/s)",
                        hashed as f64 * 100.0 / (*size).max(1) as f64,
                        all as f64 * 100.0 / total.max(1) as f64
                    );
                }
            })
            .with_context(|| format!("indexing {rel}"))?;
        }
        done_before += size;
    }
    let removed = FileIndex::remove_others(&index_dir, files.iter().map(|(rel, _)| rel.as_str()))
        .with_context(|| format!("cleaning {}", index_dir.display()))?;
    eprintln!(
        "done in {:.1} s: {built} built, {} already current, {removed} of deleted files removed; indexes in {}",
        started.elapsed().as_secs_f64(),
        files.len() - built,
        index_dir.display()
    );
    Ok(())
}

/// The regular files under `root` that `circus serve` would serve, with
/// their sizes: not in the index directory, not hidden unless `dotfiles`,
/// not behind a symlink.
fn list(root: &Path, index_dir: &Path, dotfiles: bool) -> anyhow::Result<Vec<(String, u64)>> {
    let mut files = Vec::new();
    let walk = walkdir::WalkDir::new(root).sort_by_file_name().into_iter().filter_entry(|e| {
        let name = e.file_name().to_string_lossy();
        let hidden = e.depth() > 0 && (name == INDEX_DIR || (name.starts_with('.') && !dotfiles));
        !hidden && !e.path().starts_with(index_dir)
    });
    for entry in walk {
        let entry = entry.with_context(|| format!("listing {}", root.display()))?;
        if !entry.file_type().is_file() {
            continue;
        }
        let rel = entry.path().strip_prefix(root).expect("under the root");
        let rel = rel.to_string_lossy().replace(std::path::MAIN_SEPARATOR, "/");
        files.push((rel, entry.metadata()?.len()));
    }
    Ok(files)
}
