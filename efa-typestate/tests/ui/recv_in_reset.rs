// A QP in RESET cannot post receives: Reset is not `RecvReady`.
use efa_typestate::*;

fn main() -> Result<()> {
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(CqOptions::new(8))?;
    let mr = pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
    let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
    let mut recvs = RecvBatch::<1>::new(&qp);
    recvs.push(1, mr.sge(0, 64)?)?;
    unsafe { qp.post_recv(&recvs)? };
    Ok(())
}
