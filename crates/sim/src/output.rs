//! Output of a simulation: a text table per policy, a comparison table of the policies,
//! and the same numbers as JSON or CSV (written by hand: the schema is flat and small).
//! The window metrics are listed once ([`WINDOW_FIELDS`] for files, [`COLUMNS`] for the
//! tables), so a new metric shows up in every output at once.

use std::fmt::Write as _;

use crate::policy::PolicySetting;
use crate::sim::{steady_first_window, RunReport, SimConfig, Window};
use crate::workload::{Distribution, ValueSizes};

/// One number of a window: a count, or a ratio / rate written with 6 decimals.
enum Metric {
    Count(u64),
    Real(f64),
}

type Field = (&'static str, fn(&Window) -> Metric);

/// Every per-window field of the JSON and the CSV, in order.
const WINDOW_FIELDS: &[Field] = &[
    ("end_s", |w| Metric::Count(w.end_s)),
    ("requests", |w| Metric::Count(w.requests)),
    ("reads", |w| Metric::Count(w.reads)),
    ("updates", |w| Metric::Count(w.updates)),
    ("dram_hits", |w| Metric::Count(w.dram_hits)),
    ("slow_hits", |w| Metric::Count(w.slow_hits)),
    ("misses", |w| Metric::Count(w.misses)),
    ("dram_hit_share", |w| Metric::Real(w.dram_hit_share())),
    ("hit_ratio", |w| Metric::Real(w.hit_ratio())),
    ("slow_lines_read", |w| Metric::Count(w.slow_lines_read)),
    ("slow_lines_written", |w| {
        Metric::Count(w.slow_lines_written)
    }),
    ("slow_lines_per_request", |w| {
        Metric::Real(w.slow_lines_per_request())
    }),
    ("slow_lines_written_per_request", |w| {
        Metric::Real(w.slow_lines_written_per_request())
    }),
    ("promotions", |w| Metric::Count(w.promotions)),
    ("promotions_failed", |w| Metric::Count(w.promotions_failed)),
    ("promotions_skipped", |w| {
        Metric::Count(w.promotions_skipped)
    }),
    ("demotions", |w| Metric::Count(w.demotions)),
    ("promotions_per_1k_requests", |w| {
        Metric::Real(w.promotions_per_1k_requests())
    }),
    ("promotions_skipped_per_1k_requests", |w| {
        Metric::Real(w.promotions_skipped_per_1k_requests())
    }),
    ("demotions_per_1k_requests", |w| {
        Metric::Real(w.demotions_per_1k_requests())
    }),
    ("evictions", |w| Metric::Count(w.evictions)),
    ("move_queue_dropped", |w| {
        Metric::Count(w.move_queue_dropped)
    }),
    ("hint_faults", |w| Metric::Count(w.hint_faults)),
    ("dram_items", |w| Metric::Count(w.dram_items)),
    ("slow_items", |w| Metric::Count(w.slow_items)),
    ("phase", |w| Metric::Count(u64::from(w.phase))),
];

/// Per-window fields of the flash tier, after [`WINDOW_FIELDS`], in runs with one only
/// (so that a run without flash writes exactly what it wrote before the model existed).
const FLASH_FIELDS: &[Field] = &[
    ("flash_hits", |w| Metric::Count(w.flash.hits)),
    ("flash_lookups", |w| Metric::Count(w.flash.lookups)),
    ("flash_buffer_hits", |w| Metric::Count(w.flash.buffer_hits)),
    ("hit_ratio_with_flash", |w| {
        Metric::Real(w.hit_ratio_with_flash())
    }),
    ("flash_share_of_gets", |w| Metric::Real(w.flash_share())),
    ("flash_tag_collisions", |w| {
        Metric::Count(w.flash.tag_collisions)
    }),
    ("flash_read_bytes", |w| Metric::Count(w.flash.read_bytes)),
    ("flash_reclaim_read_bytes", |w| {
        Metric::Count(w.flash.reclaim_read_bytes)
    }),
    ("flash_write_bytes", |w| Metric::Count(w.flash.write_bytes)),
    ("flash_read_bytes_per_get", |w| {
        Metric::Real(w.flash_read_bytes_per_get())
    }),
    ("flash_write_bytes_per_get", |w| {
        Metric::Real(w.flash_write_bytes_per_get())
    }),
    ("flash_admitted_items", |w| {
        Metric::Count(w.flash.admitted_items)
    }),
    ("flash_admitted_bytes", |w| {
        Metric::Count(w.flash.admitted_bytes)
    }),
    ("flash_write_amplification", |w| {
        Metric::Real(w.flash.write_amplification())
    }),
    ("flash_not_admitted", |w| {
        Metric::Count(w.flash.not_admitted)
    }),
    ("flash_clean_evictions", |w| {
        Metric::Count(w.flash.clean_evictions)
    }),
    ("flash_copy_ups", |w| Metric::Count(w.flash.copy_ups)),
    ("flash_invalidations", |w| {
        Metric::Count(w.flash.invalidations)
    }),
    ("flash_segments_written", |w| {
        Metric::Count(w.flash.segments_written)
    }),
    ("flash_segments_reclaimed", |w| {
        Metric::Count(w.flash.segments_reclaimed)
    }),
    ("flash_reinserted_items", |w| {
        Metric::Count(w.flash.reinserted_items)
    }),
    ("flash_reinserted_bytes", |w| {
        Metric::Count(w.flash.reinserted_bytes)
    }),
    ("flash_reclaim_drops", |w| {
        Metric::Count(w.flash.reclaim_drops)
    }),
    ("flash_index_drops", |w| Metric::Count(w.flash.index_drops)),
    ("flash_stale_hits", |w| Metric::Count(w.flash.stale_hits)),
    ("flash_items", |w| Metric::Count(w.flash.items)),
    ("flash_dram_bytes", |w| Metric::Count(w.flash.dram_bytes)),
    ("flash_dram_bytes_per_item", |w| {
        Metric::Real(crate::sim::ratio(w.flash.dram_bytes, w.flash.items))
    }),
];

/// The window fields of a run, flash ones included when it has a flash tier.
fn fields(flash: bool) -> impl Iterator<Item = &'static Field> {
    WINDOW_FIELDS.iter().chain(
        FLASH_FIELDS
            .iter()
            .take(if flash { FLASH_FIELDS.len() } else { 0 }),
    )
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

type Column = (&'static str, fn(&Window) -> String);

/// The columns of the text tables, after the row label.
const COLUMNS: &[Column] = &[
    ("requests", |w| w.requests.to_string()),
    ("dram_hit", |w| w.dram_hits.to_string()),
    ("slow_hit", |w| w.slow_hits.to_string()),
    ("miss", |w| w.misses.to_string()),
    ("hit%", |w| pct(w.hit_ratio())),
    ("dram%", |w| pct(w.dram_hit_share())),
    ("slowR/req", |w| {
        format!("{:.3}", w.slow_lines_per_request())
    }),
    ("slowW/req", |w| {
        format!("{:.3}", w.slow_lines_written_per_request())
    }),
    ("prom/1k", |w| {
        format!("{:.2}", w.promotions_per_1k_requests())
    }),
    ("dem/1k", |w| {
        format!("{:.2}", w.demotions_per_1k_requests())
    }),
    ("skip/1k", |w| {
        format!("{:.2}", w.promotions_skipped_per_1k_requests())
    }),
    ("evict", |w| w.evictions.to_string()),
    ("dram_it", |w| w.dram_items.to_string()),
];

/// The columns of the flash tier, after [`COLUMNS`], in runs with one only.
const FLASH_COLUMNS: &[Column] = &[
    ("flash_hit", |w| w.flash.hits.to_string()),
    ("hitall%", |w| pct(w.hit_ratio_with_flash())),
    ("flash%", |w| pct(w.flash_share())),
    ("devR/get", |w| {
        format!("{:.0}", w.flash_read_bytes_per_get())
    }),
    ("devW/get", |w| {
        format!("{:.0}", w.flash_write_bytes_per_get())
    }),
    ("WA", |w| format!("{:.3}", w.flash.write_amplification())),
    ("reins", |w| w.flash.reinserted_items.to_string()),
    ("tagcoll", |w| w.flash.tag_collisions.to_string()),
    ("fl_items", |w| w.flash.items.to_string()),
];

fn columns(flash: bool) -> impl Iterator<Item = &'static Column> {
    COLUMNS.iter().chain(
        FLASH_COLUMNS
            .iter()
            .take(if flash { FLASH_COLUMNS.len() } else { 0 }),
    )
}

const COLUMN_WIDTH: usize = 10;
const LABEL_WIDTH: usize = 14;

fn table_row(out: &mut String, label: &str, cells: impl Iterator<Item = String>) {
    let _ = write!(out, "{label:<LABEL_WIDTH$}");
    for cell in cells {
        let _ = write!(out, " {cell:>COLUMN_WIDTH$}");
    }
    out.push('\n');
}

fn window_cells(w: &Window, flash: bool) -> impl Iterator<Item = String> + '_ {
    columns(flash).map(move |(_, cell)| cell(w))
}

fn headers(flash: bool) -> impl Iterator<Item = String> {
    columns(flash).map(|(name, _)| name.to_string())
}

/// The steady-state windows of a run, as "6-10".
fn steady_range(run: &RunReport) -> String {
    let last = run.windows.len();
    let first = steady_first_window(u32::try_from(last).unwrap_or(u32::MAX));
    format!("{first}-{last}")
}

/// How the report names a distribution.
pub fn describe(distribution: &Distribution) -> String {
    match distribution {
        Distribution::Zipf { theta } => format!("zipf theta {theta}"),
        Distribution::HotSet {
            hot_first,
            hot_keys,
        } => format!(
            "hotset: every other request from keys [{hot_first}, {}), the others uniform",
            hot_first.saturating_add(*hot_keys)
        ),
        Distribution::Uniform => "uniform".to_string(),
    }
}

/// The line that opens the output: what was run.
pub fn header(config: &SimConfig, policies: &[PolicySetting]) -> String {
    let names: Vec<&str> = policies.iter().map(|p| p.name).collect();
    format!(
        "fogsim: {} keys x {} B values{}, DRAM {} MiB, slow {} MiB, {} requests in {} windows, {}, update ratio {}, seed {}, {} requests/simulated s, {} ticks/s, policies {}",
        config.keys,
        config.value_sizes.describe(),
        config.phase_change.as_ref().map_or(String::new(), |p| format!(
            ", then {} keys x {} B values, {} phases alternating the two",
            p.keys,
            p.value_sizes.describe(),
            p.phases
        )),
        config.dram_mib,
        config.slow_mib,
        config.ops,
        config.windows,
        describe(&config.distribution),
        config.update_ratio,
        config.seed,
        config.ops_per_s,
        config.ticks_per_s,
        names.join(", "),
    ) + &config.flash.as_ref().map_or(String::new(), |f| {
        format!(
            "; flash {} MiB in {} segments of {} KiB, reclaim {}, admit {}, recache {}, reinsert {} (at most {} % of a segment)",
            f.size_bytes >> 20,
            f.segments(),
            f.segment_bytes >> 10,
            f.reclaim.name(),
            f.admit.name(),
            f.recache.name(),
            f.reinsert.name(),
            f.reinsert_max_pct,
        )
    })
}

/// The table of one run: a line per window, the steady state and the whole run.
pub fn table(run: &RunReport) -> String {
    let mut out = String::new();
    let l = &run.load;
    let _ = writeln!(
        out,
        "== {} ==\nload: {} keys ({} stored), dataset {:.2}x DRAM; after load DRAM {} items, slow {} items, {} demotions, {} evictions",
        run.policy,
        l.keys,
        l.stored,
        l.dataset_to_dram_ratio,
        l.dram_items,
        l.slow_items,
        l.demotions,
        l.evictions,
    );
    let label_sim_s = |label: &str, w: &Window| format!("{label:>6} {:>6}", w.end_s);
    let flash = run.flash.is_some();
    table_row(
        &mut out,
        &format!("{:>6} {:>6}", "window", "sim_s"),
        headers(flash),
    );
    for w in &run.windows {
        table_row(
            &mut out,
            &label_sim_s(&w.index.to_string(), w),
            window_cells(w, flash),
        );
    }
    table_row(
        &mut out,
        &label_sim_s("steady", &run.steady),
        window_cells(&run.steady, flash),
    );
    table_row(
        &mut out,
        &label_sim_s("all", &run.total),
        window_cells(&run.total, flash),
    );
    let _ = writeln!(
        out,
        "steady = windows {} (the last half); all = the whole run phase",
        steady_range(run)
    );
    if let Some(k) = &run.kernel {
        let c = &k.counters;
        let _ = writeln!(
            out,
            "kernel-tiering: {} fast frames, {} pages touched ({} first touched fast, {} slow); {} hint faults, {} pages promoted, {} demoted, {} candidates over the rate limit, {} without room; hot threshold at the end {} ms",
            k.fast_frames,
            k.pages,
            c.allocated_fast,
            c.allocated_slow,
            c.hint_faults,
            c.promotions,
            c.demotions,
            c.promotions_rate_limited,
            c.promotions_no_room,
            k.hot_threshold_ms,
        );
    }
    if let Some(f) = &run.flash {
        let c = &f.counters;
        let _ = writeln!(
            out,
            "flash (whole run, load included): {} items, {} B of DRAM index + segment table = {:.2} B per flash item ({} slots, {}-bit tags; plus a {} KiB write buffer); admitted {} items / {} B, written {} B in {} segments: write amplification {:.3}; {} clean evictions (no write), {} not admitted, {} copy-ups, {} invalidations, {} segments reclaimed, {} reinserted, {} dropped by reclaim, {} by a full bucket, {} tag collisions, {} stale hits, {} eviction events dropped",
            c.items,
            c.dram_bytes,
            f.dram_bytes_per_item(),
            f.index_slots,
            f.tag_bits,
            f.buffer_bytes >> 10,
            c.admitted_items,
            c.admitted_bytes,
            c.write_bytes,
            c.segments_written,
            c.write_amplification(),
            c.clean_evictions,
            c.not_admitted,
            c.copy_ups,
            c.invalidations,
            c.segments_reclaimed,
            c.reinserted_items,
            c.reclaim_drops,
            c.index_drops,
            c.tag_collisions,
            c.stale_hits,
            f.events_dropped,
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

/// Which aggregate of a run a comparison table shows.
type Scope = fn(&RunReport) -> &Window;

/// The policies side by side, one row each: the whole run, then the steady state; then
/// the DRAM share of hits from the first to the last window, and what a DRAM holding
/// exactly the most popular keys would serve.
pub fn comparison(config: &SimConfig, runs: &[RunReport]) -> String {
    let mut out = String::new();
    let Some(first) = runs.first() else {
        return out;
    };
    let scopes: [(String, Scope); 2] = [
        (
            format!("whole run (windows 1-{})", first.windows.len()),
            |r| &r.total,
        ),
        (
            format!("steady state (windows {})", steady_range(first)),
            |r| &r.steady,
        ),
    ];
    for (title, scope) in scopes {
        let _ = writeln!(out, "== comparison, {title} ==");
        let base = scope(first).slow_lines_per_request();
        let uniform = runs
            .iter()
            .find(|r| r.policy == "uniform")
            .map(|r| scope(r).slow_lines_accessed_per_request());
        let mut extra = vec!["slowR x".to_string()];
        if uniform.is_some() {
            extra.push("RW/unif".to_string());
        }
        let flash = first.flash.is_some();
        table_row(&mut out, "policy", headers(flash).chain(extra));
        for run in runs {
            let w = scope(run);
            let mut cells = vec![if base > 0.0 {
                format!("x{:.2}", w.slow_lines_per_request() / base)
            } else {
                "n/a".to_string()
            }];
            if let Some(uniform) = uniform {
                cells.push(if uniform > 0.0 {
                    pct(w.slow_lines_accessed_per_request() / uniform)
                } else {
                    "n/a".to_string()
                });
            }
            table_row(&mut out, run.policy, window_cells(w, flash).chain(cells));
        }
        out.push('\n');
    }
    for run in runs {
        if let (Some(a), Some(b)) = (run.first(), run.last()) {
            let _ = writeln!(
                out,
                "DRAM share of get hits, {}: first window {}, last window {}",
                run.policy,
                pct(a.dram_hit_share()),
                pct(b.dram_hit_share()),
            );
        }
    }
    for run in runs {
        let _ = writeln!(
            out,
            "index, {}: {} bytes of DRAM for {} items: {:.1} bytes per item (a slow-tier item's only DRAM cost)",
            run.policy,
            run.index_bytes,
            run.items,
            run.index_bytes_per_item(),
        );
    }
    let distribution = config.distribution.build(config.keys, config.seed);
    if let (Some(last), Ok(distribution)) = (first.last(), distribution) {
        let _ = writeln!(
            out,
            "reference: DRAM holding exactly the {} most popular keys would serve {} of reads",
            last.dram_items,
            pct(distribution.head_probability(last.dram_items)),
        );
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

fn metric_text(metric: Metric) -> String {
    match metric {
        Metric::Count(v) => v.to_string(),
        Metric::Real(v) => json_f64(v),
    }
}

fn window_json(w: &Window, flash: bool) -> String {
    let mut out = format!("{{\"window\":{}", w.index);
    for (name, field) in fields(flash) {
        let _ = write!(out, ",\"{name}\":{}", metric_text(field(w)));
    }
    let pages: Vec<String> = w
        .dram_pages_by_class
        .iter()
        .map(|(chunk, pages)| format!("[{chunk},{pages}]"))
        .collect();
    let _ = write!(out, ",\"dram_pages_by_chunk_size\":[{}]", pages.join(","));
    out.push('}');
    out
}

fn kernel_json(run: &RunReport) -> String {
    let Some(k) = &run.kernel else {
        return "null".to_string();
    };
    let c = &k.counters;
    format!(
        "{{\"fast_frames\":{},\"pages\":{},\"allocated_fast\":{},\"allocated_slow\":{},\"hint_faults\":{},\"promotions\":{},\"demotions\":{},\"promotions_rate_limited\":{},\"promotions_no_room\":{},\"hot_threshold_ms\":{}}}",
        k.fast_frames,
        k.pages,
        c.allocated_fast,
        c.allocated_slow,
        c.hint_faults,
        c.promotions,
        c.demotions,
        c.promotions_rate_limited,
        c.promotions_no_room,
        k.hot_threshold_ms,
    )
}

fn flash_json(run: &RunReport) -> String {
    let Some(f) = &run.flash else {
        return String::new();
    };
    let c = &f.counters;
    format!(
        ",\"flash\":{{\"items\":{},\"dram_bytes\":{},\"dram_bytes_per_item\":{},\"index_slots\":{},\"tag_bits\":{},\"buffer_bytes\":{},\"admitted_items\":{},\"admitted_bytes\":{},\"write_bytes\":{},\"write_amplification\":{},\"clean_evictions\":{},\"not_admitted\":{},\"copy_ups\":{},\"segments_reclaimed\":{},\"reinserted_items\":{},\"index_drops\":{},\"tag_collisions\":{},\"stale_hits\":{},\"events_dropped\":{}}}",
        c.items,
        c.dram_bytes,
        json_f64(f.dram_bytes_per_item()),
        f.index_slots,
        f.tag_bits,
        f.buffer_bytes,
        c.admitted_items,
        c.admitted_bytes,
        c.write_bytes,
        json_f64(c.write_amplification()),
        c.clean_evictions,
        c.not_admitted,
        c.copy_ups,
        c.segments_reclaimed,
        c.reinserted_items,
        c.index_drops,
        c.tag_collisions,
        c.stale_hits,
        f.events_dropped,
    )
}

fn run_json(run: &RunReport) -> String {
    let l = &run.load;
    let flash = run.flash.is_some();
    let windows: Vec<String> = run.windows.iter().map(|w| window_json(w, flash)).collect();
    let steady_first = steady_first_window(u32::try_from(run.windows.len()).unwrap_or(u32::MAX));
    format!(
        "{{\"policy\":{},\"migration_enabled\":{},\"load\":{{\"keys\":{},\"stored\":{},\"dram_items\":{},\"slow_items\":{},\"dataset_to_dram_ratio\":{},\"demotions\":{},\"evictions\":{},\"end_s\":{}}},\"windows\":[{}],\"steady_first_window\":{},\"steady\":{},\"total\":{},\"wrong_values\":{},\"failed_stores\":{},\"index_bytes\":{},\"items\":{},\"kernel_tiering\":{}{}}}",
        json_str(run.policy),
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
        steady_first,
        window_json(&run.steady, flash),
        window_json(&run.total, flash),
        run.wrong_values,
        run.failed_stores,
        run.index_bytes,
        run.items,
        kernel_json(run),
        flash_json(run),
    )
}

fn distribution_json(distribution: &Distribution) -> String {
    let name = json_str(distribution.name());
    match distribution {
        Distribution::Zipf { theta } => {
            format!("\"distribution\":{name},\"theta\":{}", json_f64(*theta))
        }
        Distribution::HotSet {
            hot_first,
            hot_keys,
        } => format!("\"distribution\":{name},\"hot_first\":{hot_first},\"hot_keys\":{hot_keys}"),
        Distribution::Uniform => format!("\"distribution\":{name}"),
    }
}

/// `"value_bytes":N` for fixed sizes (as before sizes could vary), else
/// `"value_sizes":"1-8192"` with the mean.
fn value_sizes_json(sizes: &ValueSizes) -> String {
    match sizes {
        ValueSizes::Fixed(n) => format!("\"value_bytes\":{n}"),
        other => format!(
            "\"value_sizes\":{},\"value_bytes_mean\":{}",
            json_str(&other.describe()),
            json_f64(other.mean_bytes())
        ),
    }
}

/// The configuration and every run as one JSON document.
pub fn json(config: &SimConfig, runs: &[RunReport]) -> String {
    let runs: Vec<String> = runs.iter().map(run_json).collect();
    format!(
        "{{\"config\":{{\"keys\":{},{},{}\"dram_mib\":{},\"slow_mib\":{},\"ops\":{},\"windows\":{},{},\"update_ratio\":{},\"seed\":{},\"ops_per_s\":{},\"ticks_per_s\":{},\"crawler_interval_s\":{},\"benefit_reassign\":{},\"slab_automove\":{},\"kernel_tiering\":{{\"scan_period_ms\":{},\"scan_mb\":{},\"hot_threshold_ms\":{},\"promote_rate_limit_mbps\":{}}}{}}},\"runs\":[{}]}}\n",
        config.keys,
        value_sizes_json(&config.value_sizes),
        config.phase_change.as_ref().map_or(String::new(), |p| format!(
            "\"phase_change\":{{\"keys\":{},{},\"phases\":{}}},",
            p.keys,
            value_sizes_json(&p.value_sizes),
            p.phases
        )),
        config.dram_mib,
        config.slow_mib,
        config.ops,
        config.windows,
        distribution_json(&config.distribution),
        json_f64(config.update_ratio),
        config.seed,
        config.ops_per_s,
        config.ticks_per_s,
        config.crawler_interval_s,
        config.engine_overrides.benefit_reassign.unwrap_or(true),
        config
            .engine_overrides
            .slab_automove
            .map_or("null".to_string(), |a| a.to_string()),
        config.kernel.scan_period_ms,
        config.kernel.scan_mb,
        config.kernel.hot_threshold_ms,
        config.kernel.promote_rate_limit_mbps,
        config.flash.as_ref().map_or(String::new(), |f| format!(
            ",\"flash\":{{\"size_bytes\":{},\"segment_bytes\":{},\"segments\":{},\"reclaim\":{},\"admit\":{},\"recache\":{},\"reinsert\":{},\"reinsert_max_pct\":{}}}",
            f.size_bytes,
            f.segment_bytes,
            f.segments(),
            json_str(f.reclaim.name()),
            json_str(f.admit.name()),
            json_str(f.recache.name()),
            json_str(f.reinsert.name()),
            f.reinsert_max_pct,
        )),
        runs.join(","),
    )
}

/// One CSV line per window and run, then the steady state and the whole run (scope
/// `steady` and `all`, window 0).
pub fn csv(runs: &[RunReport]) -> String {
    let flash = runs.first().is_some_and(|r| r.flash.is_some());
    let mut out = String::from("policy,scope,window");
    for (name, _) in fields(flash) {
        out.push(',');
        out.push_str(name);
    }
    out.push('\n');
    for run in runs {
        let rows = run
            .windows
            .iter()
            .map(|w| ("window", w))
            .chain([("steady", &run.steady), ("all", &run.total)]);
        for (scope, w) in rows {
            let _ = write!(out, "{},{scope},{}", run.policy, w.index);
            for (_, field) in fields(flash) {
                out.push(',');
                out.push_str(&metric_text(field(w)));
            }
            out.push('\n');
        }
    }
    out
}
