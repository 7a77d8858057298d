//! The report plots: files are written, and what a reader needs (title, axis labels,
//! one legend entry and one distinct colour per series) is in them.

use std::path::{Path, PathBuf};

use bench::plot::{line_chart, Chart, Scale, Series};

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

/// A fresh directory per test under Cargo's per-crate temporary directory, so that runs
/// do not see each other's files and the output can be looked at after a failure.
fn out_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("plot")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create test output directory");
    dir
}

fn read_svg(path: &Path) -> String {
    let svg = std::fs::read_to_string(path).expect("read svg");
    let trimmed = svg.trim();
    assert!(
        trimmed.starts_with("<svg") || trimmed.starts_with("<?xml"),
        "svg starts with {:?}",
        &trimmed[..trimmed.len().min(40)]
    );
    assert!(trimmed.ends_with("</svg>"), "svg is not closed");
    svg
}

/// Asserts that `text` is the content of a `<text>` element (not just some attribute).
fn assert_has_text(svg: &str, text: &str) {
    let found = svg.split("<text").skip(1).any(|element| {
        let content = element
            .split_once('>')
            .and_then(|(_, rest)| rest.split_once("</text>"))
            .map(|(content, _)| content.trim());
        content == Some(text)
    });
    assert!(found, "no <text> element reads {text:?}");
}

/// Checks the PNG signature and the 1000x600 size in its IHDR chunk.
fn assert_png(path: &Path) {
    let png = std::fs::read(path).expect("read png");
    assert!(png.starts_with(PNG_MAGIC), "not a PNG: {}", path.display());
    assert_eq!(&png[12..16], b"IHDR");
    let width = u32::from_be_bytes([png[16], png[17], png[18], png[19]]);
    let height = u32::from_be_bytes([png[20], png[21], png[22], png[23]]);
    assert_eq!((width, height), (1000, 600));
}

/// Draws `chart` at `stem`, checks that both files are well formed (an SVG that is
/// closed, a PNG of 1000x600), and returns the SVG's text.
fn draw(chart: &Chart, stem: &Path) -> String {
    line_chart(chart, stem).unwrap_or_else(|e| panic!("drawing {}: {e:#}", stem.display()));
    let (svg_path, png_path) = paths_for(stem);
    assert_png(&png_path);
    read_svg(&svg_path)
}

fn paths_for(stem: &Path) -> (PathBuf, PathBuf) {
    let name = stem
        .file_name()
        .and_then(|n| n.to_str())
        .expect("stem name");
    (
        stem.with_file_name(format!("{name}.svg")),
        stem.with_file_name(format!("{name}.png")),
    )
}

/// Five overlaid latency distributions, shaped like the paper's Fig. 5: log-normal-ish
/// bumps at different latencies, x in µs on a log axis, y in % of requests per bucket.
fn latency_series() -> Vec<Series> {
    let configs = [
        ("(1) memcached, DRAM", 40.0),
        ("(2) memcached, PMEM", 70.0),
        ("(3) fogcached, DRAM+PMEM", 50.0),
        ("(4) fogcached, 4 GiB DRAM", 55.0),
        ("(5) memcached + extstore", 120.0),
    ];
    configs
        .iter()
        .map(|&(label, peak_us)| {
            let points = (0..80)
                .map(|bucket| {
                    let latency_us = 10f64.powf(1.0 + f64::from(bucket) * 0.03);
                    let z = (latency_us / peak_us).ln() / 0.3;
                    (latency_us, 12.0 * (-z * z / 2.0).exp())
                })
                .collect();
            Series {
                label: label.to_owned(),
                points,
            }
        })
        .collect()
}

#[test]
fn latency_distributions_chart_has_title_axes_legend_and_distinct_colours() {
    let dir = out_dir("latency");
    let series = latency_series();
    let chart = Chart {
        title: "GET latency distribution",
        x_label: "latency (µs)",
        y_label: "share of requests (% per bucket)",
        x_scale: Scale::Log10,
        y_scale: Scale::Linear,
        series: &series,
    };
    let stem = dir.join("latency");
    let written = line_chart(&chart, &stem).expect("chart");
    let (svg_path, png_path) = paths_for(&stem);
    assert_eq!(written, vec![svg_path.clone(), png_path.clone()]);

    let svg = read_svg(&svg_path);
    assert_has_text(&svg, "GET latency distribution");
    assert_has_text(&svg, "latency (µs)");
    assert_has_text(&svg, "share of requests (% per bucket)");
    for s in &series {
        assert_has_text(&svg, &s.label);
    }
    // Decade ticks of the log axis read as plain latencies.
    assert_has_text(&svg, "100");
    // One line per series, each in its own colour.
    let mut strokes: Vec<&str> = svg
        .split("<polyline")
        .skip(1)
        .filter_map(|element| element.split("stroke=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    strokes.sort_unstable();
    strokes.dedup();
    assert!(
        strokes.len() >= series.len(),
        "series lines use only {} colours: {strokes:?}",
        strokes.len()
    );
    assert_png(&png_path);
}

#[test]
fn time_series_chart_on_linear_axes() {
    let dir = out_dir("time_series");
    let series: Vec<Series> = ["fogcached", "fogcached, no slow tier", "memcached"]
        .iter()
        .enumerate()
        .map(|(i, label)| Series {
            label: (*label).to_owned(),
            points: (0..600)
                .map(|t| {
                    let t = f64::from(t);
                    (t, 100.0 - 30.0 * (-t / (50.0 * (i as f64 + 1.0))).exp())
                })
                .collect(),
        })
        .collect();
    let chart = Chart {
        title: "GET hits served from DRAM",
        x_label: "time (s)",
        y_label: "hits from DRAM (%)",
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        series: &series,
    };
    let stem = dir.join("dram_hit_share");
    let svg = draw(&chart, &stem);
    assert_has_text(&svg, "time (s)");
    assert_has_text(&svg, "hits from DRAM (%)");
    for s in &series {
        assert_has_text(&svg, &s.label);
    }
}

#[test]
fn empty_chart_is_drawn_with_a_no_data_note() {
    let dir = out_dir("empty");
    for (name, series) in [
        ("no_series", Vec::new()),
        (
            "empty_series",
            vec![
                Series {
                    label: "promotions".to_owned(),
                    points: Vec::new(),
                },
                Series {
                    label: "demotions".to_owned(),
                    points: Vec::new(),
                },
            ],
        ),
    ] {
        let chart = Chart {
            title: "Promotions per second",
            x_label: "time (s)",
            y_label: "promotions (1/s)",
            x_scale: Scale::Linear,
            y_scale: Scale::Log10,
            series: &series,
        };
        let stem = dir.join(name);
        let svg = draw(&chart, &stem);
        assert_has_text(&svg, "Promotions per second");
        assert_has_text(&svg, "no data");
        for s in &series {
            assert_has_text(&svg, &format!("{} (no data)", s.label));
        }
    }
}

#[test]
fn undrawable_points_are_skipped_not_fatal() {
    let dir = out_dir("undrawable");
    let series = vec![
        Series {
            // Only its positive, finite points can be drawn on log axes.
            label: "mixed".to_owned(),
            points: vec![
                (0.0, 5.0),
                (-1.0, 5.0),
                (10.0, 0.0),
                (10.0, -3.0),
                (f64::NAN, 1.0),
                (1.0, f64::INFINITY),
                (f64::NEG_INFINITY, 1.0),
                (100.0, 20.0),
                (1000.0, 40.0),
            ],
        },
        Series {
            label: "nothing drawable".to_owned(),
            points: vec![(0.0, 0.0), (-5.0, 1.0), (f64::NAN, f64::NAN)],
        },
    ];
    let chart = Chart {
        title: "Log axes",
        x_label: "latency (µs)",
        y_label: "requests",
        x_scale: Scale::Log10,
        y_scale: Scale::Log10,
        series: &series,
    };
    let stem = dir.join("log");
    let svg = draw(&chart, &stem);
    assert_has_text(&svg, "mixed");
    assert_has_text(&svg, "nothing drawable (no data)");
    assert!(!svg.contains("NaN"), "a NaN coordinate reached the SVG");
}

#[test]
fn single_point_and_constant_series_get_a_usable_range() {
    let dir = out_dir("degenerate");
    let series = vec![
        Series {
            label: "one point".to_owned(),
            points: vec![(3.0, 7.0)],
        },
        Series {
            label: "constant".to_owned(),
            points: vec![(3.0, 7.0), (3.0, 7.0), (3.0, 7.0)],
        },
    ];
    for (name, scale) in [("linear", Scale::Linear), ("log", Scale::Log10)] {
        let chart = Chart {
            title: "DRAM occupancy",
            x_label: "time (s)",
            y_label: "DRAM used (MiB)",
            x_scale: scale,
            y_scale: scale,
            series: &series,
        };
        let stem = dir.join(name);
        let svg = draw(&chart, &stem);
        assert_has_text(&svg, "one point");
        assert_has_text(&svg, "constant");
        // The point is drawn (as a marker) rather than lost at the edge of a zero-width
        // range.
        assert!(
            svg.contains("<circle"),
            "no marker drawn for the single point"
        );
    }
}

#[test]
fn stem_with_dots_keeps_them_and_missing_directories_are_created() {
    let dir = out_dir("stem");
    let series = vec![Series {
        label: "s".to_owned(),
        points: vec![(1.0, 1.0), (2.0, 4.0)],
    }];
    let chart = Chart {
        title: "t",
        x_label: "x",
        y_label: "y",
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        series: &series,
    };
    let stem = dir.join("nested").join("run.v2");
    let written = line_chart(&chart, &stem).expect("chart");
    assert_eq!(
        written,
        vec![
            dir.join("nested").join("run.v2.svg"),
            dir.join("nested").join("run.v2.png")
        ]
    );
    assert!(written.iter().all(|p| p.is_file()));
}

#[test]
fn many_series_with_long_labels_all_appear_in_the_legend() {
    let dir = out_dir("many");
    let series: Vec<Series> = (0..9)
        .map(|i| Series {
            label: format!(
                "fogcached -m 4096 --slow-tier /mnt/pmem{i} --slow-tier-size 28672 run {i}"
            ),
            points: (0..50)
                .map(|t| (f64::from(t), f64::from(t * (i + 1))))
                .collect(),
        })
        .collect();
    let chart = Chart {
        title: "DRAM occupancy",
        x_label: "time (s)",
        y_label: "DRAM used (MiB)",
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        series: &series,
    };
    let stem = dir.join("many");
    let svg = draw(&chart, &stem);
    for s in &series {
        assert_has_text(&svg, &s.label);
    }
}

#[test]
fn unwritable_destination_is_an_error_not_a_panic() {
    let dir = out_dir("unwritable");
    // A regular file where the chart's directory should be.
    let blocker = dir.join("blocker");
    std::fs::write(&blocker, b"").expect("create blocker file");
    let series = vec![Series {
        label: "s".to_owned(),
        points: vec![(1.0, 1.0)],
    }];
    let chart = Chart {
        title: "t",
        x_label: "x",
        y_label: "y",
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        series: &series,
    };
    let result = line_chart(&chart, &blocker.join("sub").join("chart"));
    assert!(result.is_err(), "wrote into a path below a regular file");
}
