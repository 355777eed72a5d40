import runpy, warnings, torch, tilex
warnings.simplefilter("ignore")
ex = runpy.run_path("examples/layout_conflicts.py")
m = 4096
for name in ("int4_gemm", "int4_gemm_by_hand"):
    for kw in [{"bk": 64}, {"bk": 64, "num_stages": 3}]:
        k = tilex.compile(ex[name](m, m, m, **kw))
        bad = []
        for seed in range(8):
            torch.manual_seed(seed)
            wq = torch.randint(0, 256, (m, m // 2), device="cuda", dtype=torch.uint8)
            x = torch.randn(m, m, device="cuda").half() / 16
            c = torch.empty(m, m, device="cuda")
            k(wq, x, c)
            ref = ex["unpack_int4"](wq).float() @ x.float().t()
            bad.append(int(((c - ref).abs() > 0.05).sum()))
        print(name, kw, bad, flush=True)
