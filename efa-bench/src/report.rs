//! The vs-C table: reads criterion's estimates of the last `vs_c` run
//! (`target/criterion/<case>/{ours,c}/new/estimates.json`) and prints case, ours ns,
//! C ns and their ratio.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::cases::{Case, Side};

/// One row: a case and the time per unit of each side, in nanoseconds (the mean of its
/// passes' medians; `None` when criterion has no estimate for it).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The case.
    pub case: Case,
    /// The safe API's median, ns.
    pub ours_ns: Option<f64>,
    /// The C baseline's median, ns.
    pub c_ns: Option<f64>,
}

impl Row {
    /// ours / C, when both were measured.
    pub fn ratio(&self) -> Option<f64> {
        match (self.ours_ns, self.c_ns) {
            (Some(o), Some(c)) if c > 0.0 => Some(o / c),
            _ => None,
        }
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

/// The criterion id of a side's second pass (the bench measures ours, C, C, ours).
pub fn second_pass(side: Side) -> String {
    format!("{}_2", side.name())
}

/// One side's time per unit (ns): the mean of the medians of its two passes, or the
/// median of the one pass there is.
pub fn side_ns(dir: &Path, case: Case, side: Side) -> Result<Option<f64>, String> {
    let first = median_ns(dir, case, side.name())?;
    let second = median_ns(dir, case, &second_pass(side))?;
    Ok(match (first, second) {
        (Some(a), Some(b)) => Some((a + b) / 2.0),
        (a, b) => a.or(b),
    })
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
                ours_ns: side_ns(dir, case, Side::Ours)?,
                c_ns: side_ns(dir, case, Side::C)?,
            })
        })
        .collect()
}

fn ns(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

/// The table, one line per case.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:<32} {:>11} {:>11} {:>7}",
        "case", "unit", "ours ns", "C ns", "ours/C"
    );
    for r in rows {
        let ratio = r.ratio().map_or_else(|| "-".into(), |x| format!("{x:.3}"));
        let _ = writeln!(
            out,
            "{:<20} {:<32} {:>11} {:>11} {:>7}",
            r.case.name(),
            r.case.describe(),
            ns(r.ours_ns),
            ns(r.c_ns),
            ratio
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, case: Case, side: Side, body: &str) {
        let d = dir.join(case.name()).join(side.name()).join("new");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("estimates.json"), body).unwrap();
    }

    #[test]
    fn reads_medians_and_prints_ratios() {
        let dir = std::env::temp_dir().join(format!("efa-bench-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let est = |m: f64| {
            format!(r#"{{"mean":{{"point_estimate":1e9}},"median":{{"point_estimate":{m}}}}}"#)
        };
        write(&dir, Case::Send, Side::Ours, &est(105.0));
        write(&dir, Case::Send, Side::C, &est(100.0));
        write(&dir, Case::Write, Side::C, &est(50.0));
        // Two passes per side: their medians are averaged.
        let second = |case: Case, side: Side, m: f64| {
            let d = dir.join(case.name()).join(second_pass(side)).join("new");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("estimates.json"), est(m)).unwrap();
        };
        write(&dir, Case::SendInline, Side::Ours, &est(10.0));
        second(Case::SendInline, Side::Ours, 14.0);
        write(&dir, Case::SendInline, Side::C, &est(11.0));
        second(Case::SendInline, Side::C, 13.0);
        let rows = rows(&dir).unwrap();
        assert_eq!(rows.len(), Case::ALL.len());
        assert_eq!(rows[0].ours_ns, Some(105.0));
        assert!((rows[0].ratio().unwrap() - 1.05).abs() < 1e-12);
        assert_eq!((rows[1].ours_ns, rows[1].c_ns), (None, Some(50.0)));
        assert_eq!(rows[1].ratio(), None);
        assert_eq!((rows[2].ours_ns, rows[2].c_ns), (Some(12.0), Some(12.0)));
        let t = table(&rows);
        let send = t.lines().find(|l| l.starts_with("send_sge ")).unwrap();
        assert!(send.ends_with("105.0       100.0   1.050"), "{send:?}");
        write(&dir, Case::Endpoint, Side::C, "{\"median\":{}}");
        let e = super::rows(&dir).unwrap_err();
        assert!(
            e.contains("endpoint_codec/c/new/estimates.json: no median"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
