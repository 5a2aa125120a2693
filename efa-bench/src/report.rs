//! The vs-C table: reads criterion's estimates of the last `vs_c` run
//! (`target/criterion/<case>/<pass>/new/estimates.json`, four passes per side) and prints
//! case, ours ns (provider), direct ns, C ns, and ours/C and direct/C (of each side's
//! fastest pass, and of the passes' means).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::cases::{Case, Side};

/// The order in which the bench measures the passes of a case: ours, direct, C, C,
/// direct, ours, direct, C, ours, ours, C, direct. Each side's mean position is the
/// same, so a drift of the machine's speed during a case (seen here: up to 35% across
/// one case's passes) weighs on every side alike.
pub const ORDER: [(Side, usize); 12] = [
    (Side::Ours, 1),
    (Side::Direct, 1),
    (Side::C, 1),
    (Side::C, 2),
    (Side::Direct, 2),
    (Side::Ours, 2),
    (Side::Direct, 3),
    (Side::C, 3),
    (Side::Ours, 3),
    (Side::Ours, 4),
    (Side::C, 4),
    (Side::Direct, 4),
];

/// Passes per side in [`ORDER`].
pub const PASSES: usize = ORDER.len() / Side::ALL.len();

/// The criterion id of a side's `n`th pass (from 1): `ours`, `ours_2`, … .
pub fn pass_id(side: Side, n: usize) -> String {
    match n {
        1 => side.name().to_string(),
        n => format!("{}_{n}", side.name()),
    }
}

/// One side's passes of one case: the median time per unit (ns) of each pass that
/// criterion has an estimate for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Passes(pub Vec<f64>);

impl Passes {
    /// The fastest pass's median: the pass least disturbed by the rest of the machine.
    /// The code measured is deterministic (the same instructions every pass, see the
    /// callgrind counts), so noise can only add time.
    pub fn best(&self) -> Option<f64> {
        self.0.iter().copied().reduce(f64::min)
    }

    /// The mean of the passes' medians.
    pub fn mean(&self) -> Option<f64> {
        (!self.0.is_empty()).then(|| self.0.iter().sum::<f64>() / self.0.len() as f64)
    }
}

/// One row: a case and each side's passes.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The case.
    pub case: Case,
    /// The safe API's passes (provider).
    pub ours: Passes,
    /// The safe API's passes on the direct data path.
    pub direct: Passes,
    /// The C baseline's passes.
    pub c: Passes,
}

impl Row {
    /// ours / C of the best passes, when both were measured.
    pub fn ratio(&self) -> Option<f64> {
        quotient(self.ours.best(), self.c.best())
    }

    /// ours / C of the passes' means.
    pub fn mean_ratio(&self) -> Option<f64> {
        quotient(self.ours.mean(), self.c.mean())
    }

    /// direct / C of the best passes, when both were measured.
    pub fn direct_ratio(&self) -> Option<f64> {
        quotient(self.direct.best(), self.c.best())
    }
}

fn quotient(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Where criterion writes: `$CARGO_TARGET_DIR/criterion`, else `target/criterion` of
/// the workspace this program was built in.
pub fn default_criterion_dir() -> PathBuf {
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t).join("criterion");
    }
    // The executable is target/<profile>/vs-c-report.
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(|t| t.join("criterion")))
        .unwrap_or_else(|| PathBuf::from("target/criterion"))
}

/// One side's passes of `case` under `dir`.
pub fn side_passes(dir: &Path, case: Case, side: Side) -> Result<Passes, String> {
    let mut v = Vec::new();
    for n in 1..=PASSES {
        v.extend(median_ns(dir, case, &pass_id(side, n))?);
    }
    Ok(Passes(v))
}

/// The median point estimate (ns) of criterion benchmark `<case>/<id>`, from its
/// `new/estimates.json`; an error names the file and what was wrong with it.
pub fn median_ns(dir: &Path, case: Case, id: &str) -> Result<Option<f64>, String> {
    let file = dir.join(case.name()).join(id).join("new/estimates.json");
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    json.pointer("/median/point_estimate")
        .and_then(|v| v.as_f64())
        .map(Some)
        .ok_or_else(|| format!("{}: no median.point_estimate", file.display()))
}

/// Every case's row, from `dir`.
pub fn rows(dir: &Path) -> Result<Vec<Row>, String> {
    Case::ALL
        .into_iter()
        .map(|case| {
            Ok(Row {
                case,
                ours: side_passes(dir, case, Side::Ours)?,
                direct: side_passes(dir, case, Side::Direct)?,
                c: side_passes(dir, case, Side::C)?,
            })
        })
        .collect()
}

fn ns(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

/// The table, one line per case: each side's fastest pass, ours/C and direct/C of the
/// fastest passes, and ours/C of the passes' means.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:<32} {:>11} {:>11} {:>11} {:>7} {:>8} {:>7}",
        "case", "unit", "ours ns", "direct ns", "C ns", "ours/C", "direct/C", "of mean"
    );
    let ratio = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{x:.3}"));
    for r in rows {
        let _ = writeln!(
            out,
            "{:<20} {:<32} {:>11} {:>11} {:>11} {:>7} {:>8} {:>7}",
            r.case.name(),
            r.case.describe(),
            ns(r.ours.best()),
            ns(r.direct.best()),
            ns(r.c.best()),
            ratio(r.ratio()),
            ratio(r.direct_ratio()),
            ratio(r.mean_ratio())
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, case: Case, id: &str, body: &str) {
        let d = dir.join(case.name()).join(id).join("new");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("estimates.json"), body).unwrap();
    }

    fn est(m: f64) -> String {
        format!(r#"{{"mean":{{"point_estimate":1e9}},"median":{{"point_estimate":{m}}}}}"#)
    }

    #[test]
    fn the_order_balances_the_sides() {
        let mean_pos = |side: Side| {
            let p: Vec<usize> = (0..ORDER.len()).filter(|&i| ORDER[i].0 == side).collect();
            assert_eq!(p.len(), PASSES);
            p.iter().sum::<usize>()
        };
        assert_eq!(mean_pos(Side::Ours), mean_pos(Side::C));
        assert_eq!(mean_pos(Side::Direct), mean_pos(Side::C));
        for side in Side::ALL {
            let mut n: Vec<usize> = ORDER.iter().filter(|o| o.0 == side).map(|o| o.1).collect();
            n.sort_unstable();
            assert_eq!(n, (1..=PASSES).collect::<Vec<_>>());
        }
        assert_eq!(pass_id(Side::Ours, 1), "ours");
        assert_eq!(pass_id(Side::C, 3), "c_3");
    }

    #[test]
    fn reads_medians_and_prints_ratios() {
        let dir = std::env::temp_dir().join(format!("efa-bench-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write(&dir, Case::Send, "ours", &est(105.0));
        write(&dir, Case::Send, "direct", &est(80.0));
        write(&dir, Case::Send, "c", &est(100.0));
        write(&dir, Case::Write, "c", &est(50.0));
        // Four passes per side: the fastest counts, and the means are shown too.
        for (id, m) in [
            ("ours", 14.0),
            ("ours_2", 10.0),
            ("ours_3", 12.0),
            ("ours_4", 16.0),
        ] {
            write(&dir, Case::SendInline, id, &est(m));
        }
        for (id, m) in [("c", 11.0), ("c_2", 13.0), ("c_3", 9.0), ("c_4", 11.0)] {
            write(&dir, Case::SendInline, id, &est(m));
        }
        let rows = rows(&dir).unwrap();
        assert_eq!(rows.len(), Case::ALL.len());
        assert_eq!(rows[0].ours.best(), Some(105.0));
        assert!((rows[0].ratio().unwrap() - 1.05).abs() < 1e-12);
        assert_eq!((rows[1].ours.best(), rows[1].c.best()), (None, Some(50.0)));
        assert_eq!(rows[1].ratio(), None);
        assert_eq!(
            (rows[2].ours.best(), rows[2].c.best()),
            (Some(10.0), Some(9.0))
        );
        assert_eq!(
            (rows[2].ours.mean(), rows[2].c.mean()),
            (Some(13.0), Some(11.0))
        );
        let t = table(&rows);
        let send = t.lines().find(|l| l.starts_with("send_sge ")).unwrap();
        assert!(
            send.ends_with("105.0        80.0       100.0   1.050    0.800   1.050"),
            "{send:?}"
        );
        let inline = t.lines().find(|l| l.starts_with("send_inline ")).unwrap();
        assert!(
            inline.ends_with("10.0           -         9.0   1.111        -   1.182"),
            "{inline:?}"
        );
        write(&dir, Case::Endpoint, "c_2", "{\"median\":{}}");
        let e = super::rows(&dir).unwrap_err();
        assert!(
            e.contains("endpoint_codec/c_2/new/estimates.json: no median"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
