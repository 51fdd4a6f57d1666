#![no_std]
// The programs live in main.rs; this library target only exists so that profiler can name
// this crate as a build dependency (which tells cargo when to rebuild the programs).
