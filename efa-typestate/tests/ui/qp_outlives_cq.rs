// A QP borrows its CQs: a CQ cannot be destroyed while a QP uses it.
use efa_typestate::*;

fn main() -> Result<()> {
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(CqOptions::new(8))?;
    let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
    drop(cq);
    let _ = qp.qpn();
    Ok(())
}
