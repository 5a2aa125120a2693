// An MR borrows its PD: the PD cannot be dropped while the MR exists.
use efa_typestate::*;

fn main() -> Result<()> {
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
    drop(pd);
    let _ = mr.lkey();
    Ok(())
}
