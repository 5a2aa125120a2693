// Memory peers may RDMA-write gives no safe slice: the bytes can change under it.
use efa_typestate::*;

fn main() -> Result<()> {
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let mut target = pd.register_remote_write(vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
    let view: &mut [u8] = target.as_mut_slice();
    view[0] = 1;
    Ok(())
}
