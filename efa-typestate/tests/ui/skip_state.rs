// RESET -> RTS in one step does not exist; each transition consumes the previous state.
use efa_typestate::*;

fn main() -> Result<()> {
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(CqOptions::new(8))?;
    let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
    let _rts = qp.rts(RtsOptions::default())?;
    Ok(())
}
