//! The report of `bench crypto`: Table 1 beside the paper's, the CLMUL speedup, paper 001's
//! projection and the files written.

use super::*;

/// Table 1 as printed: today's figure, the paper's line and the ratio.
pub(super) fn table(rows: &[Row]) -> Table {
    let mut t = Table::new([
        "algorithm",
        "today",
        "unit",
        "paper 1995 (Table 1)",
        "today / 1995",
    ])
    .left(&[2, 3]);
    for r in rows {
        t.row([
            r.name.to_owned(),
            crate::report::fmt_sig(r.value),
            r.unit.name().to_owned(),
            r.paper.map_or("n/a".to_owned(), |p| p.text.to_owned()),
            r.ratio().map_or("n/a".to_owned(), |x| {
                format!("{}x", crate::report::fmt_sig(x))
            }),
        ]);
    }
    t
}

/// A GHASH figure: what was measured, in Mbit/s, and how it was obtained.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Ghash {
    pub(super) name: &'static str,
    pub(super) mbps: f64,
    pub(super) detail: String,
}

/// crypto.csv: every row at full precision, then the GHASH figures; and the run record.
/// Paper 001's projected stacks: (algorithm row, the paper's stack, what the paper projects).
pub(super) const PROJECTED_001: [(&str, &str, &str); 4] = [
    ("MD5", "TCP/MD5/IP", "bottleneck ~16"),
    ("DES-CBC", "DES/TCP/IP", "scales to ~40"),
    ("3DES-CBC", "triple-DES", "\"should scale linearly\""),
    ("AES-128-GCM", "(today's)", ""),
];
/// The projection's CSV in `--out`.
pub const PROJECTION_FILE: &str = "projection.csv";

/// Paper 001's projection from this run's rows: the serial step passes `ceiling` Mbit/s of
/// `size`-byte packets; one processor's stack spends the serial path's time plus the
/// algorithm's on each packet.
pub(super) fn projection_001(rows: &[Row], ceiling: f64, size: usize) -> Result<Table> {
    let mut t = Table::new(
        "stack,algorithm,packet_bytes,ceiling_mbps,serial_us_per_packet,algorithm_mbps,stack_mbps_one_processor,us_per_packet_one_processor,bottleneck_processors,projected_speedup_8,projected_speedup_16,projected_speedup_64,paper_1995"
            .split(','),
    )
    .left(&[0, 1, 12]);
    for (alg, stack, paper) in PROJECTED_001 {
        let Some(r) = rows.iter().find(|r| r.name == alg && r.unit == Unit::Mbps) else {
            continue;
        };
        // Times per packet add: 1 / (1 / ceiling + 1 / algorithm).
        let one = 1.0 / (1.0 / ceiling + 1.0 / r.value);
        let m = crate::projection::SerialCeiling::new(ceiling, one, one, 1)?;
        let (serial, per) = m.per_packet_us(size);
        t.row([
            stack.to_owned(),
            alg.to_owned(),
            size.to_string(),
            format!("{ceiling:.1}"),
            format!("{serial:.4}"),
            format!("{:.1}", r.value),
            format!("{one:.1}"),
            format!("{per:.3}"),
            format!("{:.1}", m.bottleneck_processors()),
            format!("{:.2}", m.speedup(8.0)),
            format!("{:.2}", m.speedup(16.0)),
            format!("{:.2}", m.speedup(64.0)),
            paper.to_owned(),
        ]);
    }
    Ok(t)
}

pub(super) fn write_files(
    dir: &Path,
    rows: &[Row],
    ghash: &[Ghash],
    projection: Option<&Table>,
) -> Result<(PathBuf, PathBuf)> {
    let mut t =
        Table::new("algorithm,value,unit,paper_1995,paper_1995_unit,ratio,detail".split(','));
    let mut rec = RunRecord::new("crypto");
    for r in rows {
        t.row([
            r.name.to_owned(),
            r.value.to_string(),
            r.unit.name().to_owned(),
            r.paper.map_or(String::new(), |p| p.value.to_string()),
            r.unit.name().to_owned(),
            r.ratio().map_or(String::new(), |x| x.to_string()),
            r.detail.clone(),
        ]);
        rec.figure(r.name, r.value, r.unit.name());
        if let Some(x) = r.ratio() {
            rec.figure(format!("{} today / 1995", r.name), x, "ratio");
        }
    }
    for g in ghash {
        t.row([g.name, &g.mbps.to_string(), "Mbit/s", "", "", "", &g.detail]);
        rec.figure(g.name, g.mbps, "Mbit/s");
    }
    let csv = rec.write_csv(dir, "crypto.csv", &t)?;
    if let Some(p) = projection {
        rec.write_csv(dir, PROJECTION_FILE, p)?;
    }
    Ok((csv, rec.write(dir)?))
}
/// The paper's hardware proposal, a carry-less multiply instruction: GHASH in this binary
/// (`clmul` Mbit/s) against a software-only build's figure, if one was measured; the rows
/// for the GHASH CSV.
pub(super) fn report_clmul(out: &mut String, p: &Params, size: usize, clmul: f64) -> Vec<Ghash> {
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "carry-less multiply (the paper's proposed \"XOR multiply\" instruction): GHASH of {size}-byte buffers, RustCrypto ghash 0.5 / polyval 0.6"
    );
    let have = clmul_available();
    let in_process = if FORCED_SOFT {
        "software backend (this binary was built with --cfg polyval_force_soft)"
    } else if have {
        "CLMUL backend (PCLMULQDQ detected at run time; polyval picks it through cpufeatures)"
    } else {
        "software backend (this CPU has no PCLMULQDQ, so polyval fell back)"
    };
    let soft_path = p.out.join(GHASH_SOFT_FILE);
    let soft = std::fs::read_to_string(&soft_path)
        .ok()
        .and_then(|s| parse_soft(&s));
    let mut body = Table::new(["GHASH", "Mbit/s", "how it was obtained"]).left(&[2]);
    body.row([
        "GHASH, this binary".to_owned(),
        crate::report::fmt_sig(clmul),
        format!("measured now, in process: {in_process}"),
    ]);
    let mut ghash_csv = vec![Ghash {
        name: "GHASH in process",
        mbps: clmul,
        detail: in_process.to_owned(),
    }];
    let speedup_line = match &soft {
        Some(s) if s.forced_soft => {
            body.row([
                "GHASH, software-only build".to_owned(),
                crate::report::fmt_sig(s.mbps),
                format!(
                    "from {} (unix time {}): examples/ghash.rs built by {GHASH_SOFT_SCRIPT} with RUSTFLAGS='--cfg polyval_force_soft', {} B buffers",
                    soft_path.display(),
                    s.when,
                    s.size
                ),
            ]);
            ghash_csv.push(Ghash {
                name: "GHASH software-only build",
                mbps: s.mbps,
                detail: format!("{GHASH_SOFT_SCRIPT} --cfg polyval_force_soft, {} B", s.size),
            });
            let note = if s.size == size {
                ""
            } else {
                " (buffer sizes differ: rerun the script with the same --size)"
            };
            if have && !FORCED_SOFT {
                format!(
                    "speedup the carry-less multiply instruction buys GHASH: {:.1}x{note}",
                    clmul / s.mbps
                )
            } else {
                "speedup: not evaluated (this run had no CLMUL path)".to_owned()
            }
        }
        Some(_) => format!(
            "speedup: not evaluated ({} was not made by a software-only build)",
            soft_path.display()
        ),
        None => format!(
            "speedup: not evaluated: no software figure in {}; run `bash {GHASH_SOFT_SCRIPT}` (or this bench with --ghash-soft) to build examples/ghash.rs with RUSTFLAGS='--cfg polyval_force_soft' and measure it",
            soft_path.display()
        ),
    };
    out.push_str(&body.markdown());
    let _ = writeln!(out);
    let _ = writeln!(out, "{speedup_line}");
    ghash_csv
}

/// Paper 001's projection of packet-level parallelism (section 3), with `ceiling`'s table if
/// it was computed.
pub(super) fn report_projection(
    out: &mut String,
    projection: Option<&Table>,
    size: usize,
    t_runs: usize,
    cores: usize,
) {
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "PROJECTION by paper 001's own method (section 3; a prediction, not a measurement): \"the locked component of manipulating the TCP connection-state limits the throughput to about 200 Mbits ... the TCP/MD5/IP stack would bottleneck at about 16 processors, and ... the DES stack would scale to 40 processors\" (200 / 4.6 Mb/s, paper 000's DES stack on the same Challenge, = 43)"
    );
    match projection {
        Some(tab) => {
            out.push_str(&tab.markdown());
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "- ceiling: the baseline stack (framing only) through the PLP engine at one worker, {size}-byte packets, send side, measured in this run (median of {t_runs} runs); its time per packet is the engine's serial path and little else, so it is a floor on the ceiling and the counts are floors",
            );
            let _ = writeln!(
                out,
                "- one processor's stack: the serial path plus the algorithm row above on the same packet (times added); the paper's Figure 2 is close to linear, so the uniprocessor rate is the rate each processor adds. Counts above this machine's {cores} cores are the paper's method applied to our inputs, not measured"
            );
        }
        None => {
            let _ = writeln!(
                out,
                "(not computed: --size {size} is above the engine's largest packet, {} B)",
                crate::bench::stacks::MAX_PACKET
            );
        }
    }
}
