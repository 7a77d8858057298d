//! How every report is written: its header (how it was made: the command, the date, the
//! machine, the scale, the slow medium), the configurations table, the sections on
//! configurations that failed and on integrity, charts as Markdown images, the index of
//! a multi-experiment run, and the formatting of figures and comparisons.

use std::fmt::Write as _;

use anyhow::Context;

use super::lab::{ConfigResult, Configuration, Lab};
use super::machine::{describe_machine, filesystem_of, utc_now};
use super::{Experiment, ReproduceOptions};
use crate::plot::{line_chart, Chart};
use crate::servers::ServerKind;

impl Lab<'_> {
    /// Draws a chart into the report directory; returns the markdown that shows it.
    pub(super) fn chart(&self, stem: &str, chart: &Chart) -> anyhow::Result<String> {
        let written = line_chart(chart, &self.report_dir.join(stem))
            .with_context(|| format!("plotting {stem}"))?;
        let svg = written
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "svg"))
            .or(written.first())
            .and_then(|p| p.file_name())
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("{stem}.svg"));
        Ok(format!("![{}]({svg})\n", chart.title))
    }

    pub(super) fn header(
        &self,
        experiment: Experiment,
        source: &str,
        parameters: &[(&str, String)],
    ) -> String {
        let options = self.options;
        let mut md = String::new();
        let _ = writeln!(md, "# fogbench reproduce {}\n", experiment.name());
        let _ = writeln!(md, "{source}\n");
        let _ = writeln!(md, "## How this report was made\n");
        let _ = writeln!(md, "- Command: `{}`", options.command_line);
        let _ = writeln!(md, "- Date: {}", utc_now());
        let _ = writeln!(md, "- Machine: {}", describe_machine());
        let _ = writeln!(
            md,
            "- Servers: {}; {}",
            options.programs.version(ServerKind::Fogcached),
            options.programs.version(ServerKind::Memcached)
        );
        let _ = writeln!(
            md,
            "- Scale: {}{}",
            if options.quick { "quick" } else { "full" },
            if options.duration_override.is_some() || options.connections_override.is_some() {
                " (with overridden duration/connections)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            md,
            "- Slow medium: pool files in `{}` ({}). fogcached maps its pool there with an \
             emulated slow-tier cost `{}`; memcached's extstore file is in the same directory \
             (no emulated cost: extstore does real file I/O).",
            self.data_root.display(),
            filesystem_of(self.data_root),
            self.slow_cost
        );
        let _ = writeln!(
            md,
            "- Client and servers share this machine and talk over loopback; each server has \
             `-t {}`, the client {} threads.",
            options.server_threads, options.client_threads
        );
        for (name, value) in parameters {
            let _ = writeln!(md, "- {name}: {value}");
        }
        md.push('\n');
        md
    }
}

pub(super) fn configurations_table(md: &mut String, configs: &[Configuration]) {
    configurations_table_of(md, &configs.iter().collect::<Vec<_>>());
}

pub(super) fn configurations_table_of(md: &mut String, configs: &[&Configuration]) {
    md.push_str("## Configurations\n\n| label | configuration | server command (port flags left out) |\n|---|---|---|\n");
    for config in configs {
        configuration_row(md, config.label, config.title, &config.spec.display());
    }
    md.push('\n');
}

/// One row of the configurations table.
pub(super) fn configuration_row(md: &mut String, label: &str, title: &str, command: &str) {
    let _ = writeln!(md, "| `{label}` | {title} | `{command}` |");
}

/// "23 % lower" / "12 % higher" / "the same": `value` against `reference`.
pub(super) fn relative_change(value: Option<f64>, reference: Option<f64>) -> String {
    match (value, reference) {
        (Some(value), Some(reference)) if reference > 0.0 => {
            let change_pct = (value / reference - 1.0) * 100.0;
            if change_pct.abs() < 0.5 {
                "the same".to_owned()
            } else if change_pct < 0.0 {
                format!("{:.0} % lower", -change_pct)
            } else {
                format!("{change_pct:.0} % higher")
            }
        }
        _ => "–".to_owned(),
    }
}

pub(super) fn failures_section(md: &mut String, results: &[ConfigResult]) {
    failed_list(
        md,
        results
            .iter()
            .filter_map(|r| Some((r.label, r.outcome.as_ref().err()?.as_str()))),
    );
}

/// The section that names each configuration that did not run, with why (`(label,
/// error)` pairs); nothing when every one ran.
pub(super) fn failed_list<'a>(
    md: &mut String,
    failed: impl IntoIterator<Item = (&'a str, &'a str)>,
) {
    let mut failed = failed.into_iter().peekable();
    if failed.peek().is_none() {
        return;
    }
    md.push_str("## Configurations that did not run\n\n");
    for (label, error) in failed {
        let _ = writeln!(md, "- `{label}`: {error}");
    }
    md.push('\n');
}

pub(super) fn run_problems(results: &[ConfigResult]) -> Vec<String> {
    let mut problems = Vec::new();
    for result in results {
        if let Some(report) = result.report() {
            let run = &report.run;
            if run.counts.verify_failures > 0
                || run.connection_failures > 0
                || run.counts.error_replies > 0
            {
                problems.push(format!(
                    "`{}`: {} verify failures, {} connection failures, {} error replies{}",
                    result.label,
                    run.counts.verify_failures,
                    run.connection_failures,
                    run.counts.error_replies,
                    run.first_error
                        .as_ref()
                        .map(|e| format!(" (first: {e})"))
                        .unwrap_or_default()
                ));
            }
        }
    }
    problems
}

pub(super) fn problems_section(md: &mut String, results: &[ConfigResult]) {
    let problems = run_problems(results);
    md.push_str("## Integrity\n\n");
    if problems.is_empty() {
        md.push_str(
            "Every value read was checked (`--verify`): no verify failures, no error replies \
             and no lost connections in any configuration.\n\n",
        );
    } else {
        for problem in problems {
            let _ = writeln!(md, "- {problem}");
        }
        md.push('\n');
    }
}

pub(super) fn write_index(
    options: &ReproduceOptions,
    experiments: &[Experiment],
) -> anyhow::Result<()> {
    let mut md = String::from("# fogbench reproduce: reports\n\n");
    let _ = writeln!(md, "Made by `{}` on {}.\n", options.command_line, utc_now());
    for experiment in experiments {
        let _ = writeln!(
            md,
            "- [{}]({}/REPORT.md)",
            experiment.name(),
            experiment.name()
        );
    }
    let path = options.out_dir.join("README.md");
    std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comparison_says_lower_or_higher_by_the_sign_of_the_change() {
        // The previous wording printed "-26 % lower" for a value above its reference.
        assert_eq!(relative_change(Some(2117.0), Some(1682.0)), "26 % higher");
        assert_eq!(relative_change(Some(290.0), Some(480.0)), "40 % lower");
        assert_eq!(relative_change(Some(95.0), Some(95.2)), "the same");
        assert_eq!(relative_change(None, Some(1.0)), "–");
        assert_eq!(relative_change(Some(1.0), Some(0.0)), "–");
    }
}
