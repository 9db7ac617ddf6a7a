//! kmalloc/kfree pairs in a loop (for profiling the fast paths).
fn main() {
    let h = kmem::heap();
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut sum = 0usize;
    for i in 0..n {
        let p = h.kmalloc(64, kmem::Gfp::KERNEL).unwrap();
        sum = sum.wrapping_add(p.as_ptr() as usize + i);
        // SAFETY: allocated just above.
        unsafe { h.kfree(std::hint::black_box(p.as_ptr())) };
    }
    println!("{}", sum & 1);
}
