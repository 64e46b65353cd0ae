//! The console's charts: SVG drawn on the server, inline in the page, so they
//! need no script and survive a screenshot. Each chart names itself for
//! assistive technology (`role="img"`, a `<title>`), and every page that shows
//! one puts a table of the same numbers beside it, which is what a screen reader
//! reads. Every label is HTML-escaped.

use super::html::esc;
use std::fmt::Write as _;

/// One series of a chart: its name (in the legend) and its colour.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
}

const WIDTH: f64 = 640.0;
/// Room at the left for the axis's numbers or the bars' labels.
const LEFT: f64 = 48.0;
const FONT: &str = "font-family=\"system-ui,sans-serif\" font-size=\"12\" fill=\"#1b1b1b\"";

/// The smallest of 1, 2 or 5 times a power of ten at or above `max` (at least 1):
/// where an axis ends, so its ticks are round numbers.
pub fn nice_max(max: f64) -> f64 {
    if max <= 1.0 {
        return 1.0;
    }
    let power = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|v| *v >= max)
        .unwrap_or(10.0 * power)
}

/// A number as an axis or a bar says it: whole numbers plain, others to one place.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.1}")
    }
}

/// The opening tag and the title every chart starts with.
fn open(b: &mut String, id: &str, title: &str, height: f64) {
    let _ = write!(
        b,
        "<svg id=\"{id}\" class=\"chart\" role=\"img\" aria-labelledby=\"{id}-title\" \
         viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" \
         xmlns=\"http://www.w3.org/2000/svg\"><title id=\"{id}-title\">{}</title>",
        esc(title)
    );
}

/// The legend: one swatch and name per series, in a row at the top.
fn legend(b: &mut String, series: &[Series]) {
    let mut x = LEFT;
    for s in series {
        let _ = write!(
            b,
            "<rect x=\"{x}\" y=\"4\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"14\" {FONT}>{}</text>",
            esc(s.color),
            x + 16.0,
            esc(s.name)
        );
        // About 7 px a character at this size.
        x += 16.0 + 7.0 * s.name.chars().count() as f64 + 14.0;
    }
}

/// Columns over time, each stacked from its series' values (calls per minute by
/// outcome): `columns` are (label, one value per series).
pub fn stacked_columns(
    id: &str,
    title: &str,
    series: &[Series],
    columns: &[(String, Vec<u64>)],
) -> String {
    const TOP: f64 = 28.0;
    const PLOT: f64 = 170.0;
    let height = TOP + PLOT + 24.0;
    let mut b = String::new();
    open(&mut b, id, title, height);
    legend(&mut b, series);
    let max = columns
        .iter()
        .map(|(_, v)| v.iter().sum::<u64>())
        .max()
        .unwrap_or(0);
    let top = nice_max(max as f64);
    // The axis: a line and a number at 0, half and the top.
    for f in [0.0, 0.5, 1.0] {
        let y = TOP + PLOT - f * PLOT;
        let _ = write!(
            b,
            "<line x1=\"{LEFT}\" x2=\"{WIDTH}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#ccc\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\" {FONT}>{}</text>",
            LEFT - 6.0,
            y + 4.0,
            num(top * f)
        );
    }
    let slot = (WIDTH - LEFT) / columns.len().max(1) as f64;
    let bar = (slot * 0.7).max(1.0);
    for (i, (label, values)) in columns.iter().enumerate() {
        let x = LEFT + slot * i as f64 + (slot - bar) / 2.0;
        let mut y = TOP + PLOT;
        for (s, v) in series.iter().zip(values) {
            if *v == 0 {
                continue;
            }
            let h = *v as f64 / top * PLOT;
            y -= h;
            let _ = write!(
                b,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bar:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{}: {} {v}</title></rect>",
                esc(s.color),
                esc(label),
                esc(s.name)
            );
        }
        let _ = write!(
            b,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" {FONT}>{}</text>",
            x + bar / 2.0,
            TOP + PLOT + 16.0,
            esc(label)
        );
    }
    b.push_str("</svg>");
    b
}

/// Horizontal bars, one group per row, one bar per series in each group
/// (latency p50 and p99 per upstream; refusals by reason with one series):
/// `rows` are (label, one value per series), `unit` follows each value.
pub fn bars(
    id: &str,
    title: &str,
    series: &[Series],
    rows: &[(String, Vec<f64>)],
    unit: &str,
) -> String {
    const TOP: f64 = 26.0;
    const BAR: f64 = 16.0;
    // The rows' labels take the left; longer ones are cut, the table has them whole.
    const LABEL: f64 = 180.0;
    let group = BAR * series.len() as f64 + 10.0;
    let height = TOP + group * rows.len().max(1) as f64 + 6.0;
    let mut b = String::new();
    open(&mut b, id, title, height);
    legend(&mut b, series);
    let max = rows
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0, f64::max);
    let top = nice_max(max);
    // Room at the right for the value written after the longest bar.
    let span = WIDTH - LABEL - 70.0;
    for (i, (label, values)) in rows.iter().enumerate() {
        let y0 = TOP + group * i as f64;
        let shown: String = label.chars().take(26).collect();
        let _ = write!(
            b,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" {FONT}>{}</text>",
            LABEL - 6.0,
            y0 + group / 2.0,
            esc(&shown)
        );
        for (j, (s, v)) in series.iter().zip(values).enumerate() {
            let y = y0 + BAR * j as f64;
            let w = (v / top * span).max(if *v > 0.0 { 1.0 } else { 0.0 });
            let _ = write!(
                b,
                "<rect x=\"{LABEL}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{}\" fill=\"{}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" {FONT}>{}{unit}</text>",
                BAR - 3.0,
                esc(s.color),
                LABEL + w + 4.0,
                y + BAR - 5.0,
                num(*v),
            );
        }
    }
    b.push_str("</svg>");
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: [Series; 2] = [
        Series {
            name: "ok",
            color: "#2a9d5c",
        },
        Series {
            name: "refused",
            color: "#c0392b",
        },
    ];

    #[test]
    fn axes_end_on_round_numbers() {
        assert_eq!(
            [0.0, 1.0, 3.0, 7.0, 10.0, 11.0, 180.0, 4999.0].map(nice_max),
            [1.0, 1.0, 5.0, 10.0, 10.0, 20.0, 200.0, 5000.0]
        );
    }

    #[test]
    fn a_column_stacks_its_series_to_scale() {
        let svg = stacked_columns(
            "per-minute-chart",
            "Calls per minute",
            &TWO,
            &[("12:00".into(), vec![3, 1]), ("12:01".into(), vec![0, 0])],
        );
        // A top of 5 over 170 px: 3 calls are 102 px tall, 1 is 34, stacked above.
        assert!(svg.contains("y=\"96.0\" width=\"207.2\" height=\"102.0\" fill=\"#2a9d5c\"><title>12:00: ok 3</title>"), "{svg}");
        assert!(svg.contains("y=\"62.0\" width=\"207.2\" height=\"34.0\" fill=\"#c0392b\"><title>12:00: refused 1</title>"), "{svg}");
        assert_eq!(
            svg.matches("<rect x=\"").count(),
            2 + 2,
            "two swatches, two bars"
        );
        assert!(svg.contains(">12:01</text>") && svg.contains(">5</text>"));
        assert!(svg.starts_with("<svg id=\"per-minute-chart\" class=\"chart\" role=\"img\" aria-labelledby=\"per-minute-chart-title\""));
    }

    #[test]
    fn bars_are_labelled_escaped_and_to_scale() {
        let svg = bars(
            "latency-chart",
            "Latency",
            &TWO,
            &[("<up>".into(), vec![10.0, 20.0])],
            " ms",
        );
        assert!(svg.contains(">&lt;up&gt;</text>") && !svg.contains("<up>"));
        // A top of 20 over 390 px: 10 ms is 195 px.
        assert!(svg.contains("width=\"195.0\""), "{svg}");
        assert!(svg.contains(">10 ms</text>") && svg.contains(">20 ms</text>"));
    }
}
