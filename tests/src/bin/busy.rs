//! Test workload: spin on the CPU, in user mode, for the given number of microseconds of wall
//! time.
use std::time::{Duration, Instant};

fn main() {
    let us: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let start = Instant::now();
    let end = start + Duration::from_micros(us);
    // What a clock read costs: little through the vDSO, a system call where the kernel offers
    // no vDSO clock (a 6.1 guest under TCG: reading it every round made the spin 95% system
    // time). Rounds between reads double until the reads are under 5% of the spin, or a round
    // is a tenth of the whole.
    let read = start.elapsed().max(Duration::from_nanos(20));
    let cap = Duration::from_micros(us / 10);
    let mut rounds = 1024u64;
    let mut x = 0u64;
    loop {
        let t = Instant::now();
        if t >= end {
            break;
        }
        for _ in 0..rounds {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        x = std::hint::black_box(x);
        let took = t.elapsed();
        if took < read * 20 && took < cap {
            rounds *= 2;
        }
    }
}
