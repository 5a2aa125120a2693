// A posted lease is moved into its ticket: its bytes are out of reach until the
// completion hands it back.
use efa_typestate::*;

fn main() -> Result<()> {
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(CqOptions::new(8))?;
    let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(1, None)?;
    let pool = BufferPool::new(&pd, 64, 2)?;
    let mut slot = pool.take().unwrap();
    let _ticket = qp.post_recv_lease(slot)?;
    slot.as_mut_slice()[0] = 1;
    Ok(())
}
