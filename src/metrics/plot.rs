//! The recall plot of `hopscore eval --plot`: Recall@k against k, a line per run, one
//! panel for all questions and one per hop count (plotters' SVG backend).

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use plotters::prelude::*;

use super::eval::{EvalReport, Scores};

/// Width and height of one panel, in pixels.
const PANEL: (u32, u32) = (420, 360);

/// Line colours, one per run in turn (Tableau 10: distinct, readable on white).
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Runs the plot tells apart: each colour solid, then dashed, each with circles, then
/// with triangles. `eval` refuses more before it scores anything.
pub const MAX_RUNS: usize = 4 * COLOURS.len();

/// How run `i` is drawn: its colour, whether its line is dashed, whether its markers
/// are triangles (else circles).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Look {
    colour: RGBAColor,
    dashed: bool,
    triangles: bool,
}

fn look(i: usize) -> Look {
    let round = i / COLOURS.len();
    Look {
        colour: COLOURS[i % COLOURS.len()].to_rgba(),
        dashed: round % 2 == 1,
        triangles: round >= 2,
    }
}

/// Refuses more runs than the plot tells apart (before any work).
pub fn check_run_count(runs: usize) -> Result<()> {
    if runs > MAX_RUNS {
        bail!(
            "--plot tells at most {MAX_RUNS} runs apart (10 colours, solid and dashed, two \
             markers); {runs} were given: plot fewer (the table takes any number)"
        );
    }
    Ok(())
}

/// Writes the recall plot of `runs` (a name and its report, scored at every k from 1
/// on) to `path` (`.svg`), atomically.
pub fn write_recall_plot(path: &Path, runs: &[(String, EvalReport)]) -> Result<()> {
    check_plot_path(path)?;
    let svg = recall_svg(runs)?;
    crate::io::atomic::write_file(path, svg.as_bytes())
}

/// Refuses a plot path that is not an `.svg` file (before any work).
pub fn check_plot_path(path: &Path) -> Result<()> {
    if path.extension().and_then(|e| e.to_str()) != Some("svg") {
        bail!(
            "--plot {}: the plot is written as SVG; name a .svg file",
            path.display()
        );
    }
    Ok(())
}

/// The plot as an SVG document.
pub fn recall_svg(runs: &[(String, EvalReport)]) -> Result<String> {
    let Some((_, first)) = runs.first() else {
        bail!("no run to plot");
    };
    check_run_count(runs.len())?;
    let mut groups: Vec<Option<usize>> = vec![None];
    let mut hops: Vec<usize> = runs
        .iter()
        .flat_map(|(_, r)| r.by_hops.keys().copied())
        .collect();
    hops.sort_unstable();
    hops.dedup();
    groups.extend(hops.into_iter().map(Some));
    let k_max = first.k.iter().copied().max().unwrap_or(1).max(2);

    let mut svg = String::new();
    {
        let size = (PANEL.0 * groups.len() as u32, PANEL.1);
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        let err = |e: &dyn std::fmt::Display| anyhow!("drawing the recall plot: {e}");
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let panels = root.split_evenly((1, groups.len()));
        for (panel, group) in panels.iter().zip(&groups) {
            let title = match group {
                None => "all questions".to_string(),
                Some(h) => format!("{h}-hop questions"),
            };
            let mut chart = ChartBuilder::on(panel)
                .caption(title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(48)
                .build_cartesian_2d(0.5f64..k_max as f64 + 0.5, 0f64..1.0)
                .map_err(|e| err(&e))?;
            chart
                .configure_mesh()
                .x_desc("k")
                .y_desc("Recall@k")
                .x_labels(k_max.min(12))
                .x_label_formatter(&|x| format!("{x:.0}"))
                .draw()
                .map_err(|e| err(&e))?;
            for (i, (name, report)) in runs.iter().enumerate() {
                let scores: Option<&Scores> = match group {
                    None => Some(&report.overall),
                    Some(h) => report.by_hops.get(h),
                };
                let Some(scores) = scores else { continue };
                let look = look(i);
                let line = look.colour.stroke_width(2);
                let points: Vec<(f64, f64)> = scores
                    .recall_at_k
                    .iter()
                    .map(|(&k, &r)| (k as f64, r))
                    .collect();
                let drawn = if look.dashed {
                    chart.draw_series(DashedLineSeries::new(points.clone(), 6, 4, line))
                } else {
                    chart.draw_series(LineSeries::new(points.clone(), line))
                };
                // The legend's mark: the line (two dashes when dashed) and the marker.
                let gap = if look.dashed { 4 } else { 0 };
                drawn
                    .map_err(|e| err(&e))?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new(vec![(0, 0), (7, 0)], line)
                            + PathElement::new(vec![(7 + gap, 0), (18, 0)], line)
                    });
                let fill = look.colour.filled();
                if look.triangles {
                    chart.draw_series(points.iter().map(|&p| TriangleMarker::new(p, 4, fill)))
                } else {
                    chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, fill)))
                }
                .map_err(|e| err(&e))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(recall: &[f64], hop_recall: &[f64]) -> EvalReport {
        let scores = |r: &[f64]| Scores {
            recall_at_k: r.iter().enumerate().map(|(i, &v)| (i + 1, v)).collect(),
            ..Scores::default()
        };
        EvalReport {
            k: (1..=recall.len()).collect(),
            overall: scores(recall),
            by_hops: [(2, scores(hop_recall))].into_iter().collect(),
            ..EvalReport::default()
        }
    }

    #[test]
    fn one_line_per_run_in_each_panel() {
        let runs = vec![
            (
                "bm25".to_string(),
                report(&[0.1, 0.4, 0.6], &[0.2, 0.5, 0.7]),
            ),
            (
                "lepus".to_string(),
                report(&[0.3, 0.7, 0.9], &[0.3, 0.8, 0.9]),
            ),
        ];
        let svg = recall_svg(&runs).unwrap();
        // Two panels × two runs: a line and a legend mark (two strokes) each, in one
        // colour per run (the axes and the mesh are 1 pixel wide).
        let strokes: Vec<&str> = svg
            .split("<polyline")
            .skip(1)
            .filter(|p| p.contains("stroke-width=\"2\""))
            .filter_map(|p| p.split("stroke=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(strokes.len(), 2 * 2 * 3, "{svg}");
        let mut colours = strokes.clone();
        colours.sort_unstable();
        colours.dedup();
        assert_eq!(colours.len(), 2, "{strokes:?}");
        // A marker per k per run and panel.
        assert_eq!(svg.matches("<circle").count(), 3 * 2 * 2, "{svg}");
        for text in [
            "all questions",
            "2-hop questions",
            "bm25",
            "lepus",
            "Recall@k",
        ] {
            assert!(svg.contains(text), "{text}");
        }
        let err = write_recall_plot(Path::new("/tmp/x.png"), &runs).unwrap_err();
        assert!(err.to_string().contains("name a .svg file"), "{err}");
    }

    #[test]
    fn forty_runs_look_different_and_a_41st_is_refused() {
        let looks: Vec<Look> = (0..MAX_RUNS).map(look).collect();
        for (i, a) in looks.iter().enumerate() {
            for b in &looks[i + 1..] {
                assert_ne!(a, b, "run {i}");
            }
        }
        assert!(looks[10].dashed && !looks[10].triangles);
        assert!(looks[25].triangles && !looks[25].dashed);
        let runs: Vec<(String, EvalReport)> = (0..12)
            .map(|i| (format!("run{i}"), report(&[0.1, 0.4], &[0.2, 0.5])))
            .collect();
        let svg = recall_svg(&runs).unwrap();
        // Runs 0 and 10 share a colour; run 10's line is dashed: drawn as many segments
        // where run 0's is one polyline (each run: its line and 2 legend strokes a panel).
        let strokes = svg
            .split('<')
            .filter(|e| e.contains("stroke-width=\"2\"") && e.contains("#1F77B4"))
            .count();
        assert!(
            strokes > 2 * (3 + 3) + 10,
            "{strokes} strokes of the first colour"
        );
        let many: Vec<(String, EvalReport)> = (0..=MAX_RUNS)
            .map(|i| (format!("run{i}"), report(&[0.1], &[0.2])))
            .collect();
        let err = recall_svg(&many).unwrap_err().to_string();
        assert!(err.contains("at most 40 runs"), "{err}");
        check_run_count(MAX_RUNS).unwrap();
    }
}
