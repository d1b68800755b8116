//! The plots of `bench/REPORT.md` (`hack/plot.sh`), drawn from the raw
//! JSON lines the benchmarks leave in their sections:
//!
//! - `bench/delivery-scale.png`: time to all Ready against the number of
//!   HelmApps (ours and bare helm, 4 helm at once), section
//!   `delivery-scale`;
//! - `bench/inventory-rss.png`: operator RSS (peak and steady) against
//!   Helm releases, section `scale`.
//!
//! Text is drawn with the DejaVu Sans font of the system
//! (`PLOT_FONT` names another TTF).

use plotters::prelude::*;
use serde_json::Value;

/// The JSON lines between `<!-- BEGIN name -->` and `<!-- END name -->`.
fn section_json(report: &str, name: &str) -> Vec<Value> {
    let (begin, end) = (
        format!("<!-- BEGIN {name} -->"),
        format!("<!-- END {name} -->"),
    );
    report
        .split_once(&begin)
        .and_then(|(_, rest)| rest.split_once(&end))
        .map(|(body, _)| {
            body.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

type Series = (&'static str, RGBColor, Vec<(f64, f64)>);

fn draw(
    path: &str,
    title: &str,
    x: &str,
    y: &str,
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error>> {
    let points = series.iter().flat_map(|s| s.2.iter());
    let (xmax, ymax) = points.fold((1.0f64, 1.0f64), |(a, b), (x, y)| (a.max(*x), b.max(*y)));
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..xmax * 1.05, 0.0..ymax * 1.15)?;
    chart
        .configure_mesh()
        .x_desc(x)
        .y_desc(y)
        .label_style(("sans-serif", 15))
        .draw()?;
    for (name, color, pts) in series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
            });
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 5, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()?;
    root.present()?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let font_path = std::env::var("PLOT_FONT")
        .unwrap_or_else(|_| "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf".into());
    let font: &'static [u8] = Box::leak(
        std::fs::read(&font_path)
            .map_err(|e| format!("{font_path}: {e} (set PLOT_FONT to a TTF file)"))?
            .into_boxed_slice(),
    );
    plotters::style::register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| format!("{font_path} is not a font"))?;
    let report = std::fs::read_to_string("bench/REPORT.md")?;

    let runs = section_json(&report, "delivery-scale");
    let at4: Vec<&Value> = runs
        .iter()
        .filter(|r| r["concurrency"] == 4 && r["env"].as_array().is_some_and(Vec::is_empty))
        .collect();
    let pick = |k: &str| -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = at4
            .iter()
            .filter_map(|r| Some((r["apps"].as_f64()?, r[k].as_f64()?)))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    if !at4.is_empty() {
        draw(
            "bench/delivery-scale.png",
            "Apply to all Ready: HelmApps vs bare helm (4 at once, 2 cores)",
            "HelmApps (releases)",
            "seconds",
            &[
                ("hossted-operator", BLUE, pick("ours_secs")),
                ("bare helm --wait", RED, pick("bare_secs")),
            ],
        )?;
        println!("wrote bench/delivery-scale.png");
    }

    let scales = section_json(&report, "scale");
    let mut rows: Vec<(f64, f64, f64)> = scales
        .iter()
        .filter_map(|r| {
            Some((
                r["releases"].as_f64()?,
                r["peak_rss_mib"].as_f64()?,
                r["steady_rss_mib_after_idle"].as_f64()?,
            ))
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    if !rows.is_empty() {
        draw(
            "bench/inventory-rss.png",
            "Inventory: operator RSS against Helm releases",
            "Helm releases (x5 revisions, 5 pods each)",
            "MiB",
            &[
                ("peak RSS", RED, rows.iter().map(|r| (r.0, r.1)).collect()),
                (
                    "steady RSS",
                    BLUE,
                    rows.iter().map(|r| (r.0, r.2)).collect(),
                ),
            ],
        )?;
        println!("wrote bench/inventory-rss.png");
    }
    Ok(())
}
