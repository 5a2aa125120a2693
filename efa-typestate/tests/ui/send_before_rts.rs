// A QP in INIT cannot post sends: `post_send` exists only on `Qp<Rts>`.
use efa_typestate::*;

fn main() -> Result<()> {
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(CqOptions::new(8))?;
    let peer = pd.connect(&EndpointInfo::new(Gid::default(), 1, 1)?)?;
    let rts = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(0x22, None)?;
    let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?.init(0x11)?;
    let mut sends = SendBatch::<1>::new(&rts);
    sends.send_inline(1, &peer, b"hi")?;
    unsafe { qp.post_send(&sends)? };
    Ok(())
}
