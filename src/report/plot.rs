//! The bundle's pictures: a memory timeline per run (VRAM by source above, RAM below, node
//! boundaries and the failure marked) and a summary of a bisect's run matrix.
//!
//! Drawn with plotters' bitmap backend into memory and encoded with the `png` crate, so no
//! image library comes along. Text uses plotters' `ab_glyph` renderer with DejaVu Sans
//! embedded from the `dejavu` crate: the `ttf` feature would load fonts through font-kit and
//! the system's fontconfig/freetype, which a Windows box or a bare container may lack, and a
//! timeline without axis labels and a legend explains nothing. 1200 px wide with 15–22 px
//! text, so it stays readable when GitHub scales it down to its ~880 px column.

use super::samples::Samples;
use crate::sampler::series;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::sync::Once;

/// Width of every picture.
pub const WIDTH: u32 = 1200;
/// Height of a timeline.
pub const TIMELINE_HEIGHT: u32 = 760;

const GIB: f64 = (1u64 << 30) as f64;

/// What a timeline shows.
pub struct Timeline<'a> {
    pub title: String,
    pub samples: &'a Samples,
    /// The GPU (NVML index) to plot.
    pub gpu: u32,
    /// When the run failed and how (`oom (prompt 1)`).
    pub failure: Option<(f64, String)>,
    /// Why there are no NVML figures, when there are none.
    pub no_gpu_reason: Option<String>,
    /// Applied to every text drawn (redaction).
    pub label: &'a dyn Fn(&str) -> String,
}

/// One configuration of a bisect, for the matrix picture.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixRow {
    pub label: String,
    pub outcome: String,
    pub runs: usize,
    pub passes: usize,
    pub failures: usize,
    pub unresolved: usize,
    pub peak_vram_bytes: Option<u64>,
    /// The configuration the verdict names.
    pub verdict: bool,
}

/// The colours of the series, fixed so that a reader (and a test) can tell them apart.
pub mod colors {
    use plotters::style::RGBColor;
    pub const NVML_USED: RGBColor = RGBColor(31, 119, 180);
    pub const COMFY_VRAM: RGBColor = RGBColor(255, 127, 14);
    pub const CUDA_VIEW: RGBColor = RGBColor(44, 160, 44);
    pub const OTHERS: RGBColor = RGBColor(148, 103, 189);
    pub const OWN_CUDA: RGBColor = RGBColor(23, 190, 207);
    pub const COMFY_RSS: RGBColor = RGBColor(214, 39, 40);
    pub const RAM_USED: RGBColor = RGBColor(140, 86, 75);
    pub const SWAP: RGBColor = RGBColor(227, 119, 194);
    pub const TOTAL: RGBColor = RGBColor(110, 110, 110);
    pub const NODE: RGBColor = RGBColor(190, 190, 190);
    pub const PROMPT: RGBColor = RGBColor(90, 90, 160);
    pub const FAILURE: RGBColor = RGBColor(200, 0, 0);
    pub const PASS: RGBColor = RGBColor(60, 170, 80);
    pub const UNRESOLVED: RGBColor = RGBColor(240, 170, 40);
}

fn fonts() {
    static FONTS: Once = Once::new();
    FONTS.call_once(|| {
        // The bytes are valid TrueType; a failure would only mean text is not drawn.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
        let _ = plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold());
    });
}

fn err(e: impl std::fmt::Debug) -> String {
    format!("{e:?}")
}

/// Draws into an RGB buffer and encodes it as PNG.
fn render(
    w: u32,
    h: u32,
    draw: impl FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    fonts();
    let mut buf = vec![255u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root)?;
        root.present().map_err(err)?;
    }
    encode_png(&buf, w, h)
}

/// RGB8 pixels to PNG bytes.
pub fn encode_png(rgb: &[u8], w: u32, h: u32) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Balanced);
    let mut writer = enc.write_header().map_err(err)?;
    writer.write_image_data(rgb).map_err(err)?;
    writer.finish().map_err(err)?;
    Ok(out)
}

/// One plotted line.
struct Line {
    name: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
    /// A reference level (a total), drawn dashed.
    dashed: bool,
}

/// The typical time between two sample rows (the median), in seconds.
fn row_step(t: &[f64]) -> f64 {
    let mut d: Vec<f64> = t
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| *d > 0.0)
        .collect();
    if d.is_empty() {
        return 0.1;
    }
    d.sort_by(f64::total_cmp);
    d[d.len() / 2]
}

/// How a series is drawn: a polled series with few readings as points (a line between two
/// polls would invent every value in between, such as a climb after an OOM that never
/// happened); a dense one as lines broken wherever readings are missing for a while.
#[derive(Debug, PartialEq)]
enum Draw {
    Points(Vec<(f64, f64)>),
    Segments(Vec<Vec<(f64, f64)>>),
    /// Polled: each reading held until the next (a step, not a slope), as points too.
    Steps(Vec<Vec<(f64, f64)>>),
}

fn draw_of(points: &[(f64, f64)], step: f64) -> Draw {
    let gaps: Vec<f64> = points.windows(2).map(|w| w[1].0 - w[0].0).collect();
    let mut sorted = gaps.clone();
    sorted.sort_by(f64::total_cmp);
    let typical = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    if points.len() < 3 || typical > 3.0 * step {
        return Draw::Points(points.to_vec());
    }
    let limit = (5.0 * step).max(3.0 * typical);
    if typical > 1.5 * step {
        // Polled less often than the clock ticks: hold each reading until the next one
        // (within the gap limit), so a jump shows where it was read, not as a slope.
        let mut steps = vec![vec![points[0]]];
        for (p, gap) in points[1..].iter().zip(&gaps) {
            let seg = steps.last_mut().expect("a segment");
            if *gap > limit {
                steps.push(vec![*p]);
                continue;
            }
            let held = seg.last().expect("a point").1;
            seg.push((p.0, held));
            seg.push(*p);
        }
        return Draw::Steps(steps);
    }
    let mut segments = vec![vec![points[0]]];
    for (p, gap) in points[1..].iter().zip(gaps) {
        if gap > limit {
            segments.push(Vec::new());
        }
        segments.last_mut().expect("a segment").push(*p);
    }
    Draw::Segments(segments)
}

impl Line {
    fn new(name: &str, color: RGBColor, points: Vec<(f64, f64)>) -> Line {
        Line {
            name: name.into(),
            color,
            points: points.into_iter().map(|(t, v)| (t, v / GIB)).collect(),
            dashed: false,
        }
    }

    /// A flat line at the highest value of `points` (a total that does not change).
    fn level(name: &str, color: RGBColor, points: &[(f64, f64)], x_max: f64) -> Option<Line> {
        let v = points.iter().map(|p| p.1).fold(f64::NAN, f64::max);
        (v.is_finite() && v > 0.0).then(|| Line {
            name: name.into(),
            color,
            points: vec![(0.0, v / GIB), (x_max, v / GIB)],
            dashed: true,
        })
    }
}

/// A vertical line at an event.
struct Event {
    t: f64,
    label: String,
    color: RGBColor,
    /// Row of the label (0 = top), so neighbouring labels do not overlap.
    row: u32,
    bold: bool,
    /// The label is drawn to the left of the line (it would not fit on the right).
    right: bool,
}

/// Node boundaries, prompt starts/ends and the failure, with labels staggered over three
/// rows: each label takes the first row where it overlaps no other, and is left out where
/// there is none. The failure goes first, in the top row. A label that would run past the
/// right edge is drawn to the left of its line.
fn events(
    s: &Samples,
    failure: Option<&(f64, String)>,
    x_max: f64,
    plot_px: f64,
    label: &dyn Fn(&str) -> String,
) -> Vec<Event> {
    const CHAR_PX: f64 = 8.5;
    const GAP: f64 = 6.0;
    let px_per_s = plot_px / x_max.max(1e-6);
    let mut rows: [Vec<(f64, f64)>; 3] = Default::default();
    let mut out = Vec::new();
    let marks = failure
        .map(|(t, what)| (*t, format!("✗ {what}"), colors::FAILURE, true))
        .into_iter()
        .chain(s.marks.iter().map(|(t, mark)| {
            let (text, color) = if let Some(rest) = mark.strip_prefix("node ") {
                // `node 3 KSampler` → `KSampler`
                let class = rest.split_once(' ').map(|(_, c)| c).unwrap_or(rest);
                (class.to_string(), colors::NODE)
            } else if mark.starts_with("prompt ") {
                (mark.replace("prompt ", "#"), colors::PROMPT)
            } else {
                (mark.clone(), colors::TOTAL)
            };
            (*t, text, color, false)
        }));
    for (t, text, color, bold) in marks {
        let x = t * px_per_s;
        let width = (text.chars().count() as f64 + 1.0) * if bold { 10.0 } else { CHAR_PX };
        let right = x + width > plot_px;
        let span = if right {
            (x - width, x)
        } else {
            (x, x + width)
        };
        let free = |r: &Vec<(f64, f64)>| {
            r.iter()
                .all(|&(a, b)| span.1 + GAP <= a || b + GAP <= span.0)
        };
        let row = (0..3).find(|&r| free(&rows[r]));
        if let Some(r) = row {
            rows[r].push(span);
        }
        out.push(Event {
            t,
            label: row.map(|_| label(&text)).unwrap_or_default(),
            color,
            row: row.unwrap_or(0) as u32,
            bold,
            right,
        });
    }
    out
}

/// Lays legend items out in rows under a chart: `(row, x, line)`.
fn legend_layout(lines: &[&Line], width: i32) -> Vec<(i32, i32, usize)> {
    const LEFT: i32 = 84;
    let mut out = Vec::new();
    let (mut row, mut x) = (0, LEFT);
    for (i, l) in lines.iter().enumerate() {
        let w = 30 + l.name.chars().count() as i32 * 8 + 22;
        if x + w > width - 10 && x > LEFT {
            row += 1;
            x = LEFT;
        }
        out.push((row, x, i));
        x += w;
    }
    out
}

/// One panel: a chart with lines, event lines, a legend strip below it, and a note when
/// there is no data.
#[allow(clippy::too_many_arguments)]
fn panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    caption: &str,
    lines: &[Line],
    events: &[Event],
    x_max: f64,
    note: Option<&str>,
    label_rows: bool,
    step: f64,
) -> Result<(), String> {
    let shown: Vec<&Line> = lines.iter().filter(|l| !l.points.is_empty()).collect();
    // Scaled to the data: a total far above it (64 GiB of RAM under a 2 GiB process) would
    // flatten every change, so such a level is named in the legend instead of drawn.
    let data_max = shown
        .iter()
        .filter(|l| !l.dashed)
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let shown: Vec<&Line> = shown
        .into_iter()
        .filter(|l| !l.dashed || data_max <= 0.0 || l.points[0].1 <= data_max * 1.5)
        .collect();
    let off_scale: Vec<&Line> = lines
        .iter()
        .filter(|l| l.dashed && !l.points.is_empty() && !shown.iter().any(|s| std::ptr::eq(*s, *l)))
        .collect();
    let (w, h) = area.dim_in_pixel();
    let layout = legend_layout(&shown, w as i32);
    let legend_h = layout
        .last()
        .map(|(row, _, _)| (row + 1) * 22 + 6)
        .unwrap_or(0);
    let (chart_area, legend_area) = area.split_vertically(h as i32 - legend_h);
    let y_max = shown
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(0.1)
        * if label_rows { 1.3 } else { 1.1 };
    let mut chart = ChartBuilder::on(&chart_area)
        .caption(
            caption,
            ("sans-serif", 20).into_font().style(FontStyle::Bold),
        )
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the sampler started")
        .y_desc("GiB")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(RGBColor(246, 246, 246))
        .bold_line_style(RGBColor(222, 222, 222))
        .draw()
        .map_err(err)?;
    draw_events(&mut chart, events, y_max, label_rows)?;
    for l in &shown {
        draw_line(&mut chart, l, step)?;
    }
    draw_legend(&legend_area, &layout, &shown)?;
    for (i, l) in off_scale.iter().enumerate() {
        chart
            .plotting_area()
            .draw(&Text::new(
                format!("{}: {:.1} GiB, above this scale", l.name, l.points[0].1),
                (x_max * 0.99, y_max * (0.985 - 0.07 * i as f64)),
                ("sans-serif", 15)
                    .into_font()
                    .color(&RGBColor(90, 90, 90))
                    .pos(Pos::new(HPos::Right, VPos::Top)),
            ))
            .map_err(err)?;
    }
    if let Some(note) = note.filter(|_| shown.is_empty()) {
        chart
            .plotting_area()
            .draw(&Text::new(
                note.to_string(),
                (x_max * 0.02, y_max * 0.55),
                ("sans-serif", 17).into_font().color(&RGBColor(90, 90, 90)),
            ))
            .map_err(err)?;
    }
    Ok(())
}

/// A panel's chart.
type Chart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Event lines (node boundaries, prompts, the failure last, on top of the node lines), with
/// their labels on white boxes when the panel has room for them.
fn draw_events(
    chart: &mut Chart,
    events: &[Event],
    y_max: f64,
    label_rows: bool,
) -> Result<(), String> {
    for e in events
        .iter()
        .filter(|e| !e.bold)
        .chain(events.iter().filter(|e| e.bold))
    {
        let style = ShapeStyle {
            color: e.color.to_rgba(),
            filled: false,
            stroke_width: if e.bold { 3 } else { 1 },
        };
        chart
            .draw_series(LineSeries::new([(e.t, 0.0), (e.t, y_max)], style))
            .map_err(err)?;
        if label_rows && !e.label.is_empty() {
            let font = ("sans-serif", if e.bold { 16 } else { 14 })
                .into_font()
                .style(if e.bold {
                    FontStyle::Bold
                } else {
                    FontStyle::Normal
                });
            let color = if e.color == colors::NODE {
                RGBColor(110, 110, 110)
            } else {
                e.color
            };
            let y = y_max * (0.985 - 0.065 * e.row as f64);
            let (text, pos) = if e.right {
                (format!("{} ", e.label), Pos::new(HPos::Right, VPos::Top))
            } else {
                (format!(" {}", e.label), Pos::new(HPos::Left, VPos::Top))
            };
            // On a white box, so the boundary lines of other nodes do not strike it through.
            let size = if e.bold { 16.0 } else { 14.0 };
            let w = (text.chars().count() as f64 * size * 0.56) as i32 + 2;
            let h = size as i32 + 3;
            let (x0, x1) = if e.right { (-w, 0) } else { (0, w) };
            chart
                .plotting_area()
                .draw(
                    &(EmptyElement::at((e.t, y))
                        + Rectangle::new([(x0, -1), (x1, h)], WHITE.mix(0.85).filled())
                        + Text::new(text, (0, 0), font.color(&color).pos(pos))),
                )
                .map_err(err)?;
        }
    }
    Ok(())
}

/// One series: dashed for a level, steps where the readings are sparse, segments with gaps
/// where it was not sampled.
fn draw_line(chart: &mut Chart, l: &Line, step: f64) -> Result<(), String> {
    let style = ShapeStyle {
        color: l.color.to_rgba(),
        filled: false,
        stroke_width: if l.dashed { 1 } else { 2 },
    };
    if l.dashed {
        chart
            .draw_series(DashedLineSeries::new(l.points.clone(), 8, 6, style))
            .map_err(err)?;
        return Ok(());
    }
    match draw_of(&l.points, step) {
        Draw::Points(points) => {
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 4, l.color.filled())),
                )
                .map_err(err)?;
        }
        Draw::Steps(segments) => {
            for seg in segments {
                chart
                    .draw_series(LineSeries::new(seg.clone(), style))
                    .map_err(err)?;
                // The readings themselves, where the steps change.
                chart
                    .draw_series(
                        seg.iter()
                            .step_by(2)
                            .map(|p| Circle::new(*p, 3, l.color.filled())),
                    )
                    .map_err(err)?;
            }
        }
        Draw::Segments(segments) => {
            for seg in segments {
                if seg.len() == 1 {
                    chart
                        .draw_series(std::iter::once(Circle::new(seg[0], 2, l.color.filled())))
                        .map_err(err)?;
                } else {
                    chart
                        .draw_series(LineSeries::new(seg, style))
                        .map_err(err)?;
                }
            }
        }
    }
    Ok(())
}

/// The legend strip under a chart.
fn draw_legend(
    legend_area: &DrawingArea<BitMapBackend<'_>, Shift>,
    layout: &[(i32, i32, usize)],
    shown: &[&Line],
) -> Result<(), String> {
    for &(row, x, i) in layout {
        let l = shown[i];
        let y = row * 22 + 11;
        let style = l.color.stroke_width(if l.dashed { 1 } else { 3 });
        legend_area
            .draw(&PathElement::new([(x, y), (x + 24, y)], style))
            .map_err(err)?;
        legend_area
            .draw(&Text::new(
                l.name.clone(),
                (x + 30, y),
                ("sans-serif", 15)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
    }
    Ok(())
}

/// The memory timeline of one run as PNG bytes.
pub fn timeline_png(t: &Timeline) -> Result<Vec<u8>, String> {
    let s = t.samples;
    let g = |what| series::gpu(t.gpu, what);
    let x_max = s.end().max(0.5) * 1.02;
    let mut vram = Vec::new();
    let used = s.points(&g(series::NVML_USED));
    vram.push(Line::new("NVML used (whole GPU)", colors::NVML_USED, used));
    vram.push(Line::new(
        "ComfyUI's VRAM (NVML, per process)",
        colors::COMFY_VRAM,
        s.points(&g(series::TREE_USED)),
    ));
    // ComfyUI's `vram_free` adds torch's cached-but-free memory to CUDA's free (`comfy/model_management.py`, `get_free_memory`).
    vram.push(Line::new(
        "CUDA view: total - free (ComfyUI /system_stats)",
        colors::CUDA_VIEW,
        s.combine(
            &g(series::COMFY_VRAM_TOTAL),
            &g(series::COMFY_VRAM_FREE),
            |a, b| a - b,
        ),
    ));
    vram.push(Line::new(
        "CUDA used (vrambisect's own context)",
        colors::OWN_CUDA,
        s.points(&g(series::CUDA_USED)),
    ));
    vram.push(Line::new(
        "other processes' VRAM (NVML)",
        colors::OTHERS,
        s.points(&g(series::OTHERS_USED)),
    ));
    let nvml_total: Vec<(f64, f64)> = {
        let base = s.combine(&g(series::NVML_USED), &g(series::NVML_FREE), |a, b| a + b);
        let reserved = s.points(&g(series::NVML_RESERVED));
        let r = reserved.first().map(|p| p.1).unwrap_or(0.0);
        base.into_iter().map(|(t, v)| (t, v + r)).collect()
    };
    let total = if nvml_total.is_empty() {
        s.points(&g(series::COMFY_VRAM_TOTAL))
    } else {
        nvml_total
    };
    vram.extend(Line::level("VRAM total", colors::TOTAL, &total, x_max));

    let mut ram = vec![
        Line::new(
            "ComfyUI resident (process tree)",
            colors::COMFY_RSS,
            s.points(series::TREE_RSS),
        ),
        Line::new(
            "system RAM used (total - available)",
            colors::RAM_USED,
            s.combine(series::RAM_TOTAL, series::RAM_AVAILABLE, |a, b| a - b),
        ),
    ];
    let swap = s.points(series::SWAP_USED);
    if swap.iter().any(|p| p.1 > 0.0) {
        ram.push(Line::new("swap used", colors::SWAP, swap));
    }
    ram.extend(Line::level(
        "RAM total",
        colors::TOTAL,
        &s.points(series::RAM_TOTAL),
        x_max,
    ));

    let step = row_step(&s.t);
    let plot_px = WIDTH as f64 - 72.0 - 24.0;
    let evs = events(s, t.failure.as_ref(), x_max, plot_px, t.label);
    let gpu_note = t
        .no_gpu_reason
        .as_deref()
        .map(|r| (t.label)(&format!("no GPU figures: {r}")))
        .unwrap_or_else(|| "no GPU figures were recorded".into());
    let title = (t.label)(&t.title);
    render(WIDTH, TIMELINE_HEIGHT, |root| {
        let root = root
            .titled(
                &title,
                ("sans-serif", 22).into_font().style(FontStyle::Bold),
            )
            .map_err(err)?;
        let (top, bottom) = root.split_vertically(430);
        panel(
            &top,
            &format!("VRAM, GPU {}", t.gpu),
            &vram,
            &evs,
            x_max,
            Some(&gpu_note),
            true,
            step,
        )?;
        panel(
            &bottom,
            "RAM",
            &ram,
            &evs,
            x_max,
            Some("no RAM figures were recorded"),
            false,
            step,
        )
    })
}

/// The run matrix of a bisect as PNG bytes: one bar per configuration (passes green,
/// failures red, other outcomes amber), the verdict's row highlighted.
pub fn matrix_png(title: &str, rows: &[MatrixRow]) -> Result<Vec<u8>, String> {
    const ROW: i32 = 46;
    const TOP: i32 = 70;
    let h = (TOP + ROW * rows.len().max(1) as i32 + 40) as u32;
    render(WIDTH, h, |root| {
        let text = |size: u32, bold: bool| {
            ("sans-serif", size)
                .into_font()
                .style(if bold {
                    FontStyle::Bold
                } else {
                    FontStyle::Normal
                })
                .color(&BLACK)
        };
        root.draw(&Text::new(title.to_string(), (20, 18), text(22, true)))
            .map_err(err)?;
        root.draw(&Text::new(
            "configuration".to_string(),
            (20, TOP - 22),
            text(15, true),
        ))
        .map_err(err)?;
        root.draw(&Text::new(
            "runs: passed / failed / other".to_string(),
            (560, TOP - 22),
            text(15, true),
        ))
        .map_err(err)?;
        root.draw(&Text::new(
            "outcome, peak VRAM".to_string(),
            (880, TOP - 22),
            text(15, true),
        ))
        .map_err(err)?;
        for (i, r) in rows.iter().enumerate() {
            let y = TOP + i as i32 * ROW;
            if r.verdict {
                root.draw(&Rectangle::new(
                    [(10, y - 4), (WIDTH as i32 - 10, y + ROW - 10)],
                    RGBColor(225, 245, 228).filled(),
                ))
                .map_err(err)?;
            }
            let mut label = r.label.clone();
            if label.chars().count() > 52 {
                label = label.chars().take(50).collect::<String>() + "…";
            }
            root.draw(&Text::new(label, (20, y + 8), text(17, r.verdict)))
                .map_err(err)?;
            let (x0, x1) = (560i32, 860i32);
            let runs = r.runs.max(1) as f64;
            let mut x = x0;
            for (n, color) in [
                (r.passes, colors::PASS),
                (r.failures, colors::FAILURE),
                (r.unresolved, colors::UNRESOLVED),
            ] {
                let w = ((x1 - x0) as f64 * n as f64 / runs).round() as i32;
                if w > 0 {
                    root.draw(&Rectangle::new(
                        [(x, y + 4), (x + w, y + 28)],
                        color.filled(),
                    ))
                    .map_err(err)?;
                    x += w;
                }
            }
            root.draw(&Rectangle::new(
                [(x0, y + 4), (x1, y + 28)],
                RGBColor(120, 120, 120).stroke_width(1),
            ))
            .map_err(err)?;
            root.draw(&Text::new(
                format!(
                    "{}  {}/{}  {}",
                    r.outcome,
                    r.passes,
                    r.runs,
                    crate::text::gib_or_dash(r.peak_vram_bytes)
                ),
                (880, y + 8),
                text(17, r.verdict),
            ))
            .map_err(err)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_series_are_points_and_gaps_break_lines() {
        // Polled every 2 s on a 0.1 s clock: points, no line between two polls.
        let polled: Vec<(f64, f64)> = (0..6).map(|i| (i as f64 * 2.0, 1.0)).collect();
        assert_eq!(draw_of(&polled, 0.1), Draw::Points(polled.clone()));
        // Dense, with readings missing for 3 s in the middle: two segments.
        let mut dense: Vec<(f64, f64)> = (0..20).map(|i| (i as f64 * 0.1, 1.0)).collect();
        dense.extend((0..20).map(|i| (5.0 + i as f64 * 0.1, 2.0)));
        match draw_of(&dense, 0.1) {
            Draw::Segments(s) => assert_eq!(s.iter().map(Vec::len).collect::<Vec<_>>(), [20, 20]),
            other => panic!("{other:?}"),
        }
        assert_eq!(row_step(&[0.0, 0.1, 0.2, 0.3, 5.0]), 0.1);
        // Read every 0.2 s on a 0.1 s clock: steps, the jump where it was read.
        let polled = [(1.3, 3.0), (1.5, 3.0), (1.7, 23.0)];
        assert_eq!(
            draw_of(&polled, 0.1),
            Draw::Steps(vec![vec![
                (1.3, 3.0),
                (1.5, 3.0),
                (1.5, 3.0),
                (1.7, 3.0),
                (1.7, 23.0)
            ]])
        );
    }

    fn decode(png_bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let dec = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = dec.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    fn count(rgb: &[u8], c: RGBColor) -> usize {
        rgb.chunks(3).filter(|p| p == &[c.0, c.1, c.2]).count()
    }

    fn samples(peak: u64) -> Samples {
        let g = 1u64 << 30;
        let mut csv = String::from(
            "t_ms,gpu0.nvml.used,gpu0.nvml.free,gpu0.others.used,tree.rss,ram.total,ram.available,mark\n",
        );
        for i in 0..50u64 {
            let used = g + peak * i / 50;
            csv.push_str(&format!(
                "{},{used},{},{},{},{},{},\n",
                i * 100,
                24 * g - used,
                g / 2,
                g + i * (g / 50),
                32 * g,
                30 * g - i * (g / 25)
            ));
            if i == 10 {
                csv.push_str("1050.000,,,,,,,node 3 KSampler\n");
            }
        }
        csv.push_str("4950.000,,,,,,,prompt 1 end\n");
        Samples::parse(&csv).unwrap()
    }

    #[test]
    fn timeline_is_a_plot_of_the_samples() {
        let s = samples(20 << 30);
        let png_bytes = timeline_png(&Timeline {
            title: "run 001: oom".into(),
            samples: &s,
            gpu: 0,
            failure: Some((4.95, "oom (prompt 1)".into())),
            no_gpu_reason: None,
            label: &|s: &str| s.to_string(),
        })
        .unwrap();
        let (w, h, rgb) = decode(&png_bytes);
        assert_eq!((w, h), (WIDTH, TIMELINE_HEIGHT));
        for c in [
            colors::NVML_USED,
            colors::OTHERS,
            colors::COMFY_RSS,
            colors::RAM_USED,
            colors::FAILURE,
        ] {
            assert!(count(&rgb, c) > 50, "{c:?}: {}", count(&rgb, c));
        }
        // No ComfyUI /system_stats series: no CUDA-view line.
        assert_eq!(count(&rgb, colors::CUDA_VIEW), 0);
        // Text was drawn (the glyphs are anti-aliased: many grey levels).
        let greys = rgb
            .chunks(3)
            .filter(|p| p[0] == p[1] && p[1] == p[2] && p[0] > 20 && p[0] < 230)
            .count();
        assert!(greys > 2000, "{greys}");
        // A different recording gives a different picture.
        let other = timeline_png(&Timeline {
            title: "run 001: oom".into(),
            samples: &samples(4 << 30),
            gpu: 0,
            failure: Some((4.95, "oom (prompt 1)".into())),
            no_gpu_reason: None,
            label: &|s: &str| s.to_string(),
        })
        .unwrap();
        assert_ne!(decode(&other).2, rgb);
    }

    #[test]
    fn timeline_without_gpu_says_why() {
        let s = Samples::parse("t_ms,tree.rss,mark\n0,100,\n100,200,\n").unwrap();
        let png_bytes = timeline_png(&Timeline {
            title: "run".into(),
            samples: &s,
            gpu: 0,
            failure: None,
            no_gpu_reason: Some("libnvidia-ml.so.1 not found".into()),
            label: &|s: &str| s.to_string(),
        })
        .unwrap();
        let (w, h, rgb) = decode(&png_bytes);
        assert_eq!((w, h), (WIDTH, TIMELINE_HEIGHT));
        assert!(count(&rgb, colors::COMFY_RSS) > 50);
        assert_eq!(count(&rgb, colors::NVML_USED), 0);
    }

    #[test]
    fn matrix_has_a_bar_per_configuration() {
        let rows = vec![
            MatrixRow {
                label: "your flags".into(),
                outcome: "oom".into(),
                runs: 2,
                passes: 0,
                failures: 2,
                unresolved: 0,
                peak_vram_bytes: Some(23 << 30),
                verdict: false,
            },
            MatrixRow {
                label: "--disable-dynamic-vram".into(),
                outcome: "pass".into(),
                runs: 2,
                passes: 2,
                failures: 0,
                unresolved: 0,
                peak_vram_bytes: None,
                verdict: true,
            },
        ];
        let (w, h, rgb) = decode(&matrix_png("fixed by --disable-dynamic-vram", &rows).unwrap());
        assert_eq!(w, WIDTH);
        assert!(h >= 150);
        assert!(count(&rgb, colors::PASS) > 3000);
        assert!(count(&rgb, colors::FAILURE) > 3000);
    }
}
