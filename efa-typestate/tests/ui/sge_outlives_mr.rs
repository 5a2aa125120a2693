// An SGE borrows its MR: the MR cannot be deregistered while the SGE exists.
use efa_typestate::*;

fn main() -> Result<()> {
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
    let sge = mr.sge(0, 64)?;
    drop(mr);
    let _ = sge.len();
    Ok(())
}
