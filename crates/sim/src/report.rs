//! Output of a simulation: a text table per run plus a comparison summary, and the same
//! numbers as JSON or CSV (written by hand: the schema is flat and small).

use std::fmt::Write as _;

use crate::sim::{RunReport, SimConfig, Window};
use crate::zipf::Zipf;

fn policy_name(migration_enabled: bool) -> &'static str {
    if migration_enabled {
        "dual-lru"
    } else {
        "dual-lru --no-migration"
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// The table of one run, one line per window and a total line.
pub fn table(run: &RunReport) -> String {
    let mut out = String::new();
    let l = &run.load;
    let _ = writeln!(
        out,
        "== {} ==\nload: {} keys ({} stored), dataset {:.2}x DRAM; after load DRAM {} items, slow {} items, {} demotions, {} evictions",
        policy_name(run.migration_enabled),
        l.keys,
        l.stored,
        l.dataset_to_dram_ratio,
        l.dram_items,
        l.slow_items,
        l.demotions,
        l.evictions,
    );
    let _ = writeln!(
        out,
        "{:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "window",
        "sim_s",
        "requests",
        "dram_hit",
        "slow_hit",
        "miss",
        "hit%",
        "dram%",
        "slowL/req",
        "promote",
        "skip",
        "demote",
        "evict",
        "dram_it",
    );
    for w in run.windows.iter().chain(std::iter::once(&run.total)) {
        let label = if w.index == 0 {
            "all".to_string()
        } else {
            w.index.to_string()
        };
        let _ = writeln!(
            out,
            "{:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} {:>10.3} {:>9} {:>9} {:>9} {:>9} {:>9}",
            label,
            w.end_s,
            w.requests,
            w.dram_hits,
            w.slow_hits,
            w.misses,
            pct(w.hit_ratio()),
            pct(w.dram_hit_share()),
            w.slow_lines_per_request(),
            w.promotions,
            w.promotions_skipped,
            w.demotions,
            w.evictions,
            w.dram_items,
        );
    }
    if run.wrong_values > 0 || run.failed_stores > 0 {
        let _ = writeln!(
            out,
            "WARNING: {} hits returned a value not written for the key, {} stores refused",
            run.wrong_values, run.failed_stores
        );
    }
    out
}

/// The headline numbers: DRAM hit share first vs last window, slow lines per request
/// with and without migration.
pub fn summary(config: &SimConfig, with: &RunReport, without: Option<&RunReport>) -> String {
    let mut out = String::new();
    if let (Some(last), Ok(zipf)) = (with.last(), Zipf::new(config.keys, config.theta)) {
        let _ = writeln!(
            out,
            "reference: DRAM holding exactly the {} most popular keys would serve {} of reads",
            last.dram_items,
            pct(zipf.head_probability(last.dram_items)),
        );
    }
    if let (Some(first), Some(last)) = (with.first(), with.last()) {
        let first_share = first.dram_hit_share();
        let last_share = last.dram_hit_share();
        let growth = if first_share > 0.0 {
            format!("x{:.2}", last_share / first_share)
        } else {
            "n/a".to_string()
        };
        let _ = writeln!(
            out,
            "DRAM share of get hits with migration: first window {}, last window {} ({growth})",
            pct(first_share),
            pct(last_share),
        );
    }
    if let Some(without) = without {
        let w = with.total.slow_lines_per_request();
        let wo = without.total.slow_lines_per_request();
        let _ = writeln!(
            out,
            "slow-tier lines read per request, whole run: {w:.3} with migration, {wo:.3} without ({})",
            if wo > 0.0 {
                format!("x{:.2}", w / wo)
            } else {
                "n/a".to_string()
            }
        );
        if let (Some(a), Some(b)) = (with.last(), without.last()) {
            let _ = writeln!(
                out,
                "slow-tier lines read per request, last window: {:.3} with migration, {:.3} without",
                a.slow_lines_per_request(),
                b.slow_lines_per_request(),
            );
        }
        if let (Some(first), Some(last)) = (without.first(), without.last()) {
            let _ = writeln!(
                out,
                "DRAM share of get hits without migration: first window {}, last window {}",
                pct(first.dram_hit_share()),
                pct(last.dram_hit_share()),
            );
        }
    }
    out
}

/// A JSON string literal (the only strings written are ASCII names).
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A finite f64 as JSON (non-finite values cannot occur, but JSON has no NaN).
fn json_f64(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.6}")
    } else {
        "null".to_string()
    }
}

fn window_json(w: &Window) -> String {
    format!(
        "{{\"window\":{},\"end_s\":{},\"requests\":{},\"reads\":{},\"updates\":{},\"dram_hits\":{},\"slow_hits\":{},\"misses\":{},\"dram_hit_share\":{},\"hit_ratio\":{},\"slow_lines_read\":{},\"slow_lines_written\":{},\"slow_lines_per_request\":{},\"promotions\":{},\"promotions_failed\":{},\"promotions_skipped\":{},\"demotions\":{},\"evictions\":{},\"move_queue_dropped\":{},\"dram_items\":{},\"slow_items\":{}}}",
        w.index,
        w.end_s,
        w.requests,
        w.reads,
        w.updates,
        w.dram_hits,
        w.slow_hits,
        w.misses,
        json_f64(w.dram_hit_share()),
        json_f64(w.hit_ratio()),
        w.slow_lines_read,
        w.slow_lines_written,
        json_f64(w.slow_lines_per_request()),
        w.promotions,
        w.promotions_failed,
        w.promotions_skipped,
        w.demotions,
        w.evictions,
        w.move_queue_dropped,
        w.dram_items,
        w.slow_items,
    )
}

fn run_json(run: &RunReport) -> String {
    let l = &run.load;
    let windows: Vec<String> = run.windows.iter().map(window_json).collect();
    format!(
        "{{\"policy\":{},\"migration_enabled\":{},\"load\":{{\"keys\":{},\"stored\":{},\"dram_items\":{},\"slow_items\":{},\"dataset_to_dram_ratio\":{},\"demotions\":{},\"evictions\":{},\"end_s\":{}}},\"windows\":[{}],\"total\":{},\"wrong_values\":{},\"failed_stores\":{}}}",
        json_str(policy_name(run.migration_enabled)),
        run.migration_enabled,
        l.keys,
        l.stored,
        l.dram_items,
        l.slow_items,
        json_f64(l.dataset_to_dram_ratio),
        l.demotions,
        l.evictions,
        l.end_s,
        windows.join(","),
        window_json(&run.total),
        run.wrong_values,
        run.failed_stores,
    )
}

/// The configuration and every run as one JSON document.
pub fn json(config: &SimConfig, runs: &[&RunReport]) -> String {
    let runs: Vec<String> = runs.iter().map(|r| run_json(r)).collect();
    format!(
        "{{\"config\":{{\"keys\":{},\"value_bytes\":{},\"dram_mib\":{},\"slow_mib\":{},\"ops\":{},\"windows\":{},\"theta\":{},\"update_ratio\":{},\"seed\":{},\"ops_per_s\":{},\"ticks_per_s\":{},\"crawler_interval_s\":{}}},\"runs\":[{}]}}\n",
        config.keys,
        config.value_bytes,
        config.dram_mib,
        config.slow_mib,
        config.ops,
        config.windows,
        json_f64(config.theta),
        json_f64(config.update_ratio),
        config.seed,
        config.ops_per_s,
        config.ticks_per_s,
        config.crawler_interval_s,
        runs.join(","),
    )
}

/// One CSV line per window and run (the totals as window 0).
pub fn csv(runs: &[&RunReport]) -> String {
    let mut out = String::from(
        "policy,window,end_s,requests,reads,updates,dram_hits,slow_hits,misses,dram_hit_share,hit_ratio,slow_lines_read,slow_lines_written,slow_lines_per_request,promotions,promotions_failed,promotions_skipped,demotions,evictions,move_queue_dropped,dram_items,slow_items\n",
    );
    for run in runs {
        for w in run.windows.iter().chain(std::iter::once(&run.total)) {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{:.6},{:.6},{},{},{:.6},{},{},{},{},{},{},{},{}",
                policy_name(run.migration_enabled),
                w.index,
                w.end_s,
                w.requests,
                w.reads,
                w.updates,
                w.dram_hits,
                w.slow_hits,
                w.misses,
                w.dram_hit_share(),
                w.hit_ratio(),
                w.slow_lines_read,
                w.slow_lines_written,
                w.slow_lines_per_request(),
                w.promotions,
                w.promotions_failed,
                w.promotions_skipped,
                w.demotions,
                w.evictions,
                w.move_queue_dropped,
                w.dram_items,
                w.slow_items,
            );
        }
    }
    out
}
