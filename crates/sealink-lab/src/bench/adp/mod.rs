//! `sealink bench adp`: paper 002's trace-driven evaluation rerun over the simulated link in
//! virtual time (deterministic for a seed). `trace` generates the five traces, `policy` the
//! urgency policies U1-U5, `model` the service times of the hosts and wire, `run` one run, and
//! `tables` the experiments and their markdown and CSV.

pub mod model;
pub mod policy;
pub mod run;
pub mod trace;
