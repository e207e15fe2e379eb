//! The paper's Figures 7–17 as parameter sweeps.
use crate::SimConfig;
use std::path::Path;

#[derive(Debug, Clone, Copy)]
pub struct Figure(pub u32);

pub fn select(which: &str) -> Result<Vec<Figure>, String> {
    Err(format!("figures not yet available: {which}"))
}

pub fn run_figures(
    _f: &[Figure],
    _base: &SimConfig,
    _out: &Path,
    _quick: bool,
    _log: &mut dyn FnMut(&str),
) -> Result<(), String> {
    Ok(())
}
