//! Line charts for fogbench reports: overlaid latency distributions (log-scaled latency
//! on x, share of requests on y) and per-second time series (hit share, promotions, DRAM
//! occupancy), one coloured line per server configuration.
//!
//! Every chart is written as SVG and as PNG. Both are drawn with `plotters` on pure-Rust
//! backends; text is measured (and, for PNG, rasterised) with `ab_glyph` over DejaVu Sans
//! embedded in the binary by the `dejavu` crate, so a fresh machine needs no system font
//! and no font library, at build time or at run time.
//!
//! Axes are computed from the data, never from the caller: points that cannot be drawn
//! (NaN, infinities, and values <= 0 on a log axis) are skipped, and an empty chart still
//! gets axes, a legend and a "no data" note instead of an error.
//!
//! Log axes are drawn by plotting `log10(value)` on a linear axis with tick marks placed
//! and labelled by this module: that keeps one code path for the four combinations of
//! axis scales and lets ticks fall on 1-2-5 multiples of decades, which is what people
//! read on a latency plot.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Context;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend text (for example the server configuration).
    pub label: String,
    /// `(x, y)` points in data units, drawn in this order.
    pub points: Vec<(f64, f64)>,
}

/// How an axis maps values to positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Decades are equally spaced; values <= 0 are not drawn.
    Log10,
}

/// A line chart: one line per series, with the axis labels given verbatim (they should
/// carry their units, e.g. "latency (µs)").
#[derive(Debug, Clone, Copy)]
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub x_scale: Scale,
    pub y_scale: Scale,
    pub series: &'a [Series],
}

/// Image size of every chart, in pixels.
pub const CHART_WIDTH_PX: u32 = 1000;
pub const CHART_HEIGHT_PX: u32 = 600;

/// The `plotters` font family that every text style of this module uses; the embedded
/// font is registered under this name.
const FONT_FAMILY: &str = "sans-serif";

const TITLE_FONT_PX: f64 = 30.0;
const AXIS_DESC_FONT_PX: f64 = 22.0;
const TICK_FONT_PX: f64 = 18.0;
const LEGEND_FONT_PX: f64 = 18.0;
/// Legend labels longer than the legend panel allows are drawn smaller, down to this;
/// past that (labels of about 75 characters) they are cut at the image's edge.
const LEGEND_FONT_MIN_PX: f64 = 11.0;

/// The legend panel to the right of the plot: its width follows the longest label
/// within these bounds, so the plot keeps at least half of the image.
const LEGEND_WIDTH_MIN_PX: u32 = 150;
const LEGEND_WIDTH_MAX_PX: u32 = 500;
/// Width of the line sample drawn before each legend label.
const LEGEND_SAMPLE_PX: i32 = 36;
const LEGEND_ROW_PX: i32 = 30;
const LEGEND_PADDING_PX: i32 = 10;

/// Line width of every series.
const LINE_WIDTH_PX: u32 = 2;
/// Marker radius; markers tell series apart where colours do not (grey print, colour
/// blindness beyond what the palette covers, more than eight series).
const MARKER_PX: i32 = 5;
/// At most this many markers per series: enough to identify a line, few enough not to
/// hide its shape when it has hundreds of points.
const MARKERS_PER_SERIES_MAX: usize = 12;

/// Target number of tick labels on a linear axis (the 1-2-5 step makes it approximate).
const X_TICKS_TARGET: f64 = 8.0;
const Y_TICKS_TARGET: f64 = 6.0;
/// Share of the data span added on each side of a linear axis (log axes: of the span
/// in decades).
const AXIS_MARGIN_SHARE: f64 = 0.05;
/// A log axis spanning at most this many decades also gets ticks at 2x and 5x each
/// decade; a wider one gets ticks at decades only (a shorter one would have too few).
const LOG_DENSE_TICKS_DECADES_MAX: f64 = 3.0;
/// A log axis wider than this gets ticks at every n-th decade only, so labels never
/// overlap however wide the data is.
const LOG_TICKS_MAX: usize = 12;

/// Okabe & Ito's colour-blind-safe palette, most distinct colours first; its yellow is
/// darkened so that it reads on white. Series beyond eight reuse the colours, with a
/// different marker.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0x00, 0x00, 0x00), // black
    RGBColor(0xB8, 0xA2, 0x00), // dark yellow
];

/// Marker shapes, cycled with a period coprime to the palette's so that series 9 and
/// up still differ from series 1 in colour or shape.
#[derive(Clone, Copy)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Cross,
    HollowCircle,
    HollowSquare,
    HollowTriangle,
}

const MARKERS: [Marker; 7] = [
    Marker::Circle,
    Marker::Triangle,
    Marker::Square,
    Marker::Cross,
    Marker::HollowCircle,
    Marker::HollowSquare,
    Marker::HollowTriangle,
];

/// Draws `chart` as `<stem>.svg` and `<stem>.png` (the extensions are appended, so a
/// stem with dots keeps them) and returns the paths written. Missing parent directories
/// are created.
pub fn line_chart(chart: &Chart, stem: &Path) -> anyhow::Result<Vec<PathBuf>> {
    register_font()?;
    if let Some(parent) = stem.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating directory {}", parent.display()))?;
    }
    let layout = Layout::new(chart);
    let svg_path = with_suffix(stem, "svg");
    {
        let root =
            SVGBackend::new(&svg_path, (CHART_WIDTH_PX, CHART_HEIGHT_PX)).into_drawing_area();
        draw(&root, chart, &layout).with_context(|| format!("drawing {}", svg_path.display()))?;
    }
    let png_path = with_suffix(stem, "png");
    {
        let root =
            BitMapBackend::new(&png_path, (CHART_WIDTH_PX, CHART_HEIGHT_PX)).into_drawing_area();
        draw(&root, chart, &layout).with_context(|| format!("drawing {}", png_path.display()))?;
    }
    Ok(vec![svg_path, png_path])
}

fn with_suffix(stem: &Path, extension: &str) -> PathBuf {
    let mut name = stem.as_os_str().to_owned();
    name.push(".");
    name.push(extension);
    PathBuf::from(name)
}

/// Registers the embedded font with `plotters` once per process. The outcome is kept so
/// that a (theoretical) invalid font is reported by every call, not only the first.
fn register_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let fonts = [
                (FontStyle::Normal, dejavu::sans::regular()),
                (FontStyle::Bold, dejavu::sans::bold()),
            ];
            for (style, bytes) in fonts {
                plotters::style::register_font(FONT_FAMILY, style, bytes).map_err(|_| {
                    format!(
                        "the embedded DejaVu Sans ({}) is not a valid font",
                        style.as_str()
                    )
                })?;
            }
            Ok(())
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// One series, reduced to what can be drawn, in plot coordinates (log10 of the value
/// on a log axis).
struct PlotSeries<'a> {
    label: &'a str,
    points: Vec<(f64, f64)>,
}

/// One axis: its range and tick marks in plot coordinates.
struct Axis {
    scale: Scale,
    lo: f64,
    hi: f64,
    /// Labelled ticks with grid lines.
    ticks: Vec<f64>,
    /// Unlabelled light grid lines.
    minor_ticks: Vec<f64>,
    /// Step of the labelled ticks on a linear axis: it decides how many decimals the
    /// labels need.
    step: f64,
}

/// Everything computed from the data before drawing, shared by the SVG and PNG passes.
struct Layout<'a> {
    series: Vec<PlotSeries<'a>>,
    x: Axis,
    y: Axis,
}

impl<'a> Layout<'a> {
    fn new(chart: &Chart<'a>) -> Self {
        let series: Vec<PlotSeries<'a>> = chart
            .series
            .iter()
            .map(|s| PlotSeries {
                label: &s.label,
                points: s
                    .points
                    .iter()
                    .filter_map(|&(x, y)| {
                        Some((to_plot(x, chart.x_scale)?, to_plot(y, chart.y_scale)?))
                    })
                    .collect(),
            })
            .collect();
        let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
        let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
        let x = Axis::new(chart.x_scale, xs, X_TICKS_TARGET);
        let y = Axis::new(chart.y_scale, ys, Y_TICKS_TARGET);
        Layout { series, x, y }
    }

    fn has_data(&self) -> bool {
        self.series.iter().any(|s| !s.points.is_empty())
    }
}

/// Maps a data value to plot coordinates, or `None` if it cannot be drawn.
fn to_plot(value: f64, scale: Scale) -> Option<f64> {
    match scale {
        Scale::Linear => value.is_finite().then_some(value),
        Scale::Log10 => (value.is_finite() && value > 0.0).then(|| value.log10()),
    }
}

impl Axis {
    fn new(scale: Scale, values: impl Iterator<Item = f64>, ticks_target: f64) -> Self {
        let (min, max) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        let (lo, hi) = match scale {
            Scale::Linear => linear_range(min, max),
            Scale::Log10 => log_range(min, max),
        };
        match scale {
            Scale::Linear => {
                let step = nice_step((hi - lo) / ticks_target);
                let ticks = multiples_within(lo, hi, step);
                let minor_ticks = multiples_within(lo, hi, step / 2.0);
                Axis {
                    scale,
                    lo,
                    hi,
                    ticks,
                    minor_ticks,
                    step,
                }
            }
            Scale::Log10 => {
                let (ticks, minor_ticks) = log_ticks(lo, hi);
                Axis {
                    scale,
                    lo,
                    hi,
                    ticks,
                    minor_ticks,
                    step: 1.0,
                }
            }
        }
    }

    fn coord(&self) -> TickedCoord {
        TickedCoord {
            inner: RangedCoordf64::from(self.lo..self.hi),
            ticks: self.ticks.clone(),
            minor_ticks: self.minor_ticks.clone(),
        }
    }

    fn label(&self, plot_value: f64) -> String {
        match self.scale {
            Scale::Linear => format_linear(plot_value, self.step),
            Scale::Log10 => format_log(plot_value),
        }
    }
}

/// A linear `plotters` axis whose grid lines are the ticks computed by [`Axis`] (the
/// built-in f64 axis would pick its own, and `plotters`' key-point wrapper cannot be
/// combined with a custom label formatter).
struct TickedCoord {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
    minor_ticks: Vec<f64>,
}

impl Ranged for TickedCoord {
    // Never used for text: both axes get an explicit label formatter.
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.minor_ticks.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

/// The range of a linear axis: the data with a margin; non-negative data whose minimum
/// is near zero starts at zero (shares, rates and sizes read best from a zero baseline).
fn linear_range(min: f64, max: f64) -> (f64, f64) {
    if !(min.is_finite() && max.is_finite()) {
        return (0.0, 1.0);
    }
    let span = max - min;
    let margin = if span > 0.0 {
        span * AXIS_MARGIN_SHARE
    } else {
        // All values equal: a band around them, as wide as the value is large.
        (max.abs() * 0.1).max(1.0)
    };
    let mut lo = min - margin;
    let hi = max + margin;
    if min >= 0.0 && (lo < 0.0 || min <= 0.25 * max) {
        lo = 0.0;
    }
    (lo, hi)
}

/// The range of a log axis in decades: the data with a margin, at least one decade.
fn log_range(min: f64, max: f64) -> (f64, f64) {
    if !(min.is_finite() && max.is_finite()) {
        return (0.0, 1.0);
    }
    let span = max - min;
    if span < 1.0 {
        let mid = (min + max) / 2.0;
        return (mid - 0.5 - AXIS_MARGIN_SHARE, mid + 0.5 + AXIS_MARGIN_SHARE);
    }
    let margin = span * AXIS_MARGIN_SHARE;
    (min - margin, max + margin)
}

/// The 1, 2 or 5 times a power of ten nearest to `raw` (geometrically), so an axis gets
/// about as many ticks as asked for.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    // The thresholds are the geometric means of neighbouring steps.
    let nice = if fraction < 2f64.sqrt() {
        1.0
    } else if fraction < 10f64.sqrt() {
        2.0
    } else if fraction < 50f64.sqrt() {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// Multiples of `step` in `[lo, hi]`; bounded because `step` is a share of the span.
fn multiples_within(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    if !(step > 0.0 && hi > lo) {
        return Vec::new();
    }
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last)
        .take(1000)
        .map(|i| {
            let v = i as f64 * step;
            // Keep "-0" out of the labels.
            if v == 0.0 {
                0.0
            } else {
                v
            }
        })
        .collect()
}

/// Tick marks of a log axis spanning `[lo, hi]` decades: labelled ticks at decades (and
/// at 2x and 5x on a short axis), light lines at every integer multiple of a decade.
fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let first = lo.floor() as i32;
    let last = hi.ceil() as i32;
    let decades = last - first;
    let dense = (hi - lo) <= LOG_DENSE_TICKS_DECADES_MAX;
    let decade_stride = (decades as usize).div_ceil(LOG_TICKS_MAX).max(1);
    let mut ticks = Vec::new();
    let mut minor = Vec::new();
    for (index, decade) in (first..=last).enumerate() {
        for multiple in 1..=9u32 {
            let t = decade as f64 + f64::from(multiple).log10();
            if t < lo || t > hi {
                continue;
            }
            let labelled = if multiple == 1 {
                index % decade_stride == 0
            } else {
                dense && (multiple == 2 || multiple == 5)
            };
            if labelled {
                ticks.push(t);
            } else if decade_stride == 1 {
                minor.push(t);
            }
        }
    }
    (ticks, minor)
}

/// A linear tick label with as many decimals as the tick step needs.
fn format_linear(value: f64, step: f64) -> String {
    let magnitude = value.abs();
    if magnitude != 0.0 && !(1e-4..1e7).contains(&magnitude) {
        return format_scientific(value);
    }
    let decimals = (-step.log10().floor()).clamp(0.0, 6.0) as usize;
    format!("{value:.decimals$}")
}

/// A log tick label: the value itself (1, 20, 500, 0.01) rather than 10^k, because
/// people read latencies and sizes in plain numbers.
fn format_log(plot_value: f64) -> String {
    let value = 10f64.powf(plot_value);
    let magnitude = value.abs();
    if !(1e-4..1e7).contains(&magnitude) {
        return format_scientific(value);
    }
    // Ticks sit on 1, 2 and 5 times a decade, so one significant digit is exact.
    let decade = plot_value.floor();
    let decimals = (-decade).clamp(0.0, 6.0) as usize;
    format!("{value:.decimals$}")
}

fn format_scientific(value: f64) -> String {
    let text = format!("{value:.1e}");
    // "2.0e6" reads better as "2e6".
    text.replace(".0e", "e")
}

/// Estimated width in pixels of `text` in the chart font, with a rough fallback so that
/// a measuring failure only costs layout precision.
fn text_width_px<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    size_px: f64,
) -> i32 {
    let style = TextStyle::from((FONT_FAMILY, size_px));
    match area.estimate_text_size(text, &style) {
        Ok((w, _)) => i32::try_from(w).unwrap_or(i32::MAX),
        Err(_) => (text.chars().count() as f64 * size_px * 0.6) as i32,
    }
}

/// Draws the whole chart on `root` and flushes it to its file.
fn draw<DB>(root: &DrawingArea<DB, Shift>, chart: &Chart, layout: &Layout) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    // Breathing room around the whole image, so the title and the legend frame do not
    // touch its edges.
    let framed = root.margin(12, 4, 4, 12);
    let title_style = TextStyle::from(
        (FONT_FAMILY, TITLE_FONT_PX)
            .into_font()
            .style(FontStyle::Bold),
    )
    .color(&BLACK);
    let body = framed.titled(chart.title, title_style)?;

    // The legend panel width follows the longest label; labels that would not fit even
    // the widest panel get a smaller font instead of being cut.
    let longest_px = layout
        .series
        .iter()
        .map(|s| text_width_px(root, &legend_text(s), LEGEND_FONT_PX))
        .max()
        .unwrap_or(0);
    let chrome_px = 3 * LEGEND_PADDING_PX + LEGEND_SAMPLE_PX + 10;
    let wanted_px = u32::try_from(longest_px.saturating_add(chrome_px)).unwrap_or(u32::MAX);
    let legend_width_px = wanted_px.clamp(LEGEND_WIDTH_MIN_PX, LEGEND_WIDTH_MAX_PX);
    let legend_font_px = if wanted_px > LEGEND_WIDTH_MAX_PX && longest_px > 0 {
        let room = f64::from(LEGEND_WIDTH_MAX_PX) - f64::from(chrome_px);
        (LEGEND_FONT_PX * room / f64::from(longest_px)).max(LEGEND_FONT_MIN_PX)
    } else {
        LEGEND_FONT_PX
    };
    let (body_width_px, _) = body.dim_in_pixel();
    let (plot_area, legend_area) =
        body.split_horizontally(body_width_px.saturating_sub(legend_width_px));

    let x = &layout.x;
    let y = &layout.y;
    let mut cartesian = ChartBuilder::on(&plot_area)
        .margin(12)
        .x_label_area_size(64)
        .y_label_area_size(96)
        .build_cartesian_2d(x.coord(), y.coord())?;

    let x_formatter = |v: &f64| x.label(*v);
    let y_formatter = |v: &f64| y.label(*v);
    cartesian
        .configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .x_label_formatter(&x_formatter)
        .y_label_formatter(&y_formatter)
        .axis_desc_style((FONT_FAMILY, AXIS_DESC_FONT_PX))
        .label_style((FONT_FAMILY, TICK_FONT_PX))
        .bold_line_style(BLACK.mix(0.15))
        .light_line_style(BLACK.mix(0.05))
        .axis_style(BLACK.stroke_width(1))
        .draw()?;

    for (index, series) in layout.series.iter().enumerate() {
        let style = series_style(index);
        if series.points.len() > 1 {
            cartesian.draw_series(LineSeries::new(series.points.iter().copied(), style))?;
        }
        // Markers are drawn in pixels on the root area: `plotters`' dynamic elements
        // would need a 'static backend, and markers sit on data points, which are
        // inside the plot, so nothing needs clipping.
        let marker = MARKERS[index % MARKERS.len()];
        for i in marker_positions(series.points.len(), index) {
            if let Some(p) = series.points.get(i) {
                let at = cartesian.plotting_area().map_coordinate(p);
                draw_marker(root, at, marker, style)?;
            }
        }
    }

    if !layout.has_data() {
        let grey = BLACK.mix(0.6);
        let note = TextStyle::from((FONT_FAMILY, AXIS_DESC_FONT_PX))
            .color(&grey)
            .pos(Pos::new(HPos::Center, VPos::Center));
        let (w, h) = cartesian.plotting_area().dim_in_pixel();
        let centre = (
            i32::try_from(w / 2).unwrap_or(0),
            i32::try_from(h / 2).unwrap_or(0),
        );
        cartesian
            .plotting_area()
            .strip_coord_spec()
            .draw_text("no data", &note, centre)?;
    }

    draw_legend(&legend_area, layout, legend_font_px)?;
    root.present()?;
    Ok(())
}

fn series_style(index: usize) -> ShapeStyle {
    PALETTE[index % PALETTE.len()].stroke_width(LINE_WIDTH_PX)
}

/// The legend text of a series; one without drawable points says so, so that a missing
/// configuration is visible rather than silently absent.
fn legend_text(series: &PlotSeries) -> String {
    if series.points.is_empty() {
        format!("{} (no data)", series.label)
    } else {
        series.label.to_owned()
    }
}

/// Indices of the points that get a marker: all of them on short series, otherwise
/// evenly spread ones, shifted per series so that markers of overlapping lines do not
/// sit on top of each other.
fn marker_positions(len: usize, series_index: usize) -> impl Iterator<Item = usize> {
    let stride = len.div_ceil(MARKERS_PER_SERIES_MAX).max(1);
    let offset = if stride > 1 {
        (series_index * stride / PALETTE.len()) % stride
    } else {
        0
    };
    (offset..len).step_by(stride)
}

/// Draws a marker centred on `at` (pixel coordinates of `area`).
fn draw_marker<DB>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    marker: Marker,
    style: ShapeStyle,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    let r = MARKER_PX;
    let (x, y) = at;
    let filled = style.filled();
    let hollow = style.stroke_width(LINE_WIDTH_PX);
    let triangle = vec![(x, y - r - 1), (x + r + 1, y + r), (x - r - 1, y + r)];
    let square = [(x - r + 1, y - r + 1), (x + r - 1, y + r - 1)];
    match marker {
        Marker::Circle => area.draw(&Circle::new(at, r, filled))?,
        Marker::HollowCircle => area.draw(&Circle::new(at, r, hollow))?,
        Marker::Triangle => area.draw(&Polygon::new(triangle, filled))?,
        Marker::HollowTriangle => {
            let mut outline = triangle;
            outline.push((x, y - r - 1));
            area.draw(&PathElement::new(outline, hollow))?;
        }
        Marker::Square => area.draw(&Rectangle::new(square, filled))?,
        Marker::HollowSquare => area.draw(&Rectangle::new(square, hollow))?,
        Marker::Cross => {
            area.draw(&PathElement::new(
                vec![(x - r, y - r), (x + r, y + r)],
                hollow,
            ))?;
            area.draw(&PathElement::new(
                vec![(x - r, y + r), (x + r, y - r)],
                hollow,
            ))?;
        }
    }
    Ok(())
}

/// The legend: a framed panel with one row per series (line sample with its marker,
/// then the label), top-aligned with the plot.
fn draw_legend<DB>(
    area: &DrawingArea<DB, Shift>,
    layout: &Layout,
    font_px: f64,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    if layout.series.is_empty() {
        return Ok(());
    }
    let (width_px, height_px) = area.dim_in_pixel();
    let width_px = i32::try_from(width_px).unwrap_or(i32::MAX);
    let height_px = i32::try_from(height_px).unwrap_or(i32::MAX);
    let rows = i32::try_from(layout.series.len()).unwrap_or(i32::MAX);
    let top = LEGEND_PADDING_PX + 12;
    let box_height = rows
        .saturating_mul(LEGEND_ROW_PX)
        .saturating_add(2 * LEGEND_PADDING_PX)
        .min(height_px - top - LEGEND_PADDING_PX);
    let left = 0;
    let right = width_px - LEGEND_PADDING_PX;
    area.draw(&Rectangle::new(
        [(left, top), (right, top + box_height)],
        WHITE.filled(),
    ))?;
    area.draw(&Rectangle::new(
        [(left, top), (right, top + box_height)],
        BLACK.mix(0.4).stroke_width(1),
    ))?;
    let text_style = TextStyle::from((FONT_FAMILY, font_px))
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (index, series) in layout.series.iter().enumerate() {
        let row = i32::try_from(index).unwrap_or(i32::MAX);
        let y = top + LEGEND_PADDING_PX + row * LEGEND_ROW_PX + LEGEND_ROW_PX / 2;
        if y > top + box_height {
            // More series than rows fit in the image height: the rest cannot be shown.
            break;
        }
        let style = series_style(index);
        let x0 = left + LEGEND_PADDING_PX;
        area.draw(&PathElement::new(
            vec![(x0, y), (x0 + LEGEND_SAMPLE_PX, y)],
            style,
        ))?;
        let marker = MARKERS[index % MARKERS.len()];
        draw_marker(area, (x0 + LEGEND_SAMPLE_PX / 2, y), marker, style)?;
        area.draw_text(
            &legend_text(series),
            &text_style,
            (x0 + LEGEND_SAMPLE_PX + LEGEND_PADDING_PX, y),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_are_one_two_five() {
        assert_eq!(nice_step(0.8), 1.0);
        assert_eq!(nice_step(1.3), 1.0);
        assert_eq!(nice_step(2.1), 2.0);
        assert_eq!(nice_step(4.0), 5.0);
        assert_eq!(nice_step(7.5), 10.0);
        assert_eq!(nice_step(170.0), 200.0);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
    }

    #[test]
    fn linear_range_has_margin_and_zero_baseline() {
        assert_eq!(linear_range(10.0, 20.0), (9.5, 20.5));
        // Non-negative data near zero starts at zero.
        assert_eq!(linear_range(1.0, 100.0).0, 0.0);
        // Negative data keeps its margin below.
        assert_eq!(linear_range(-10.0, 10.0), (-11.0, 11.0));
        // All values equal: a band around them.
        assert_eq!(linear_range(50.0, 50.0), (45.0, 55.0));
        assert_eq!(linear_range(-3.0, -3.0), (-4.0, -2.0));
        // No data.
        assert_eq!(linear_range(f64::INFINITY, f64::NEG_INFINITY), (0.0, 1.0));
    }

    #[test]
    fn log_range_spans_at_least_a_decade() {
        let (lo, hi) = log_range(2.0, 2.0);
        assert!(lo < 2.0 && hi > 2.0 && hi - lo >= 1.0);
        let (lo, hi) = log_range(1.0, 4.0);
        assert!((lo - 0.85).abs() < 1e-9 && (hi - 4.15).abs() < 1e-9);
    }

    #[test]
    fn log_ticks_fall_on_decades_and_read_as_plain_numbers() {
        let (ticks, minor) = log_ticks(0.9, 4.1);
        let labels: Vec<String> = ticks.iter().map(|&t| format_log(t)).collect();
        assert_eq!(labels, ["10", "100", "1000", "10000"]);
        assert!(!minor.is_empty());
        let (ticks, _) = log_ticks(-1.05, 0.8);
        let labels: Vec<String> = ticks.iter().map(|&t| format_log(t)).collect();
        assert_eq!(labels, ["0.1", "0.2", "0.5", "1", "2", "5"]);
        // A very wide axis is thinned to a bounded number of labels.
        let (ticks, _) = log_ticks(-100.0, 100.0);
        assert!(ticks.len() <= LOG_TICKS_MAX + 1, "{} ticks", ticks.len());
        assert_eq!(format_log(7.0), "1e7");
    }

    #[test]
    fn linear_labels_use_the_decimals_of_the_step() {
        assert_eq!(format_linear(2.5, 0.5), "2.5");
        assert_eq!(format_linear(40.0, 20.0), "40");
        assert_eq!(format_linear(0.0, 0.01), "0.00");
        assert_eq!(format_linear(2e9, 1e9), "2e9");
        assert_eq!(multiples_within(-0.1, 0.25, 0.1), vec![-0.1, 0.0, 0.1, 0.2]);
    }

    #[test]
    fn markers_are_bounded_per_series() {
        assert_eq!(marker_positions(5, 0).count(), 5);
        let many: Vec<usize> = marker_positions(1000, 3).collect();
        assert!(many.len() <= MARKERS_PER_SERIES_MAX);
        assert!(many.iter().all(|&i| i < 1000));
    }
}
