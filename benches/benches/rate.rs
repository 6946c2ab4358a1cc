//! Token-bucket takes (filled in with the local store).

use criterion::{Criterion, criterion_group, criterion_main};

fn bench_rate(_c: &mut Criterion) {}

criterion_group!(benches, bench_rate);
criterion_main!(benches);
