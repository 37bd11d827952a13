"""The Triton forwards at the issue's four shapes, launcher and public wrapper (default tiles, the
model's choice), do_bench medians: the quick check that fits in a short device call.

    PYTHONPATH=. python bench/attention/forward_quick.py
"""
import torch, triton, mymetaops
from mymetaops.triton import hstu_attention as H, jagged_attention as S
for B,N,Hh,D in ((64,1024,4,128),(256,512,2,128),(32,4096,4,128),(512,256,4,64)):
    g=torch.Generator().manual_seed(0); L=torch.randint(1,N+1,(B,),generator=g)
    off=torch.zeros(B+1,dtype=torch.int64); off[1:]=L.cumsum(0); T=int(off[-1]); off=off.cuda()
    q,k,v=(torch.randn(T,Hh,D,device="cuda",dtype=torch.bfloat16) for _ in range(3))
    fl=sum(4*D*Hh*l*(l+1)/2 for l in L.tolist())
    r=[]
    for fn in (lambda: H.hstu_attention_fwd(q,k,v,off,N,0.1), lambda: mymetaops.hstu_attention(q,k,v,off,N,0.1),
               lambda: S.jagged_attention_fwd(q,k,v,off,N), lambda: mymetaops.jagged_attention(q,k,v,off,N)):
        r.append(fl/triton.testing.do_bench(fn,warmup=10,rep=40)/1e9)
    print(f"B{B} N{N} H{Hh} D{D}: hstu launcher {r[0]:.0f} public {r[1]:.0f} | softmax launcher {r[2]:.0f} public {r[3]:.0f} TF", flush=True)
