set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation . 2>&1 | grep -v WARNING | tail -1
nvidia-smi --query-gpu=name --format=csv,noheader; date -u
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_tf32x3_conv.py tests/test_depthwise.py tests/test_templates.py 2>&1 | tail -4 | tee $OUT/gpu-tests.log
(cd bench && timeout 120 python3 bench_templates.py --match depthwise) 2>&1 | tee $OUT/templates-depthwise.log | tail -14
(cd bench && timeout 150 python3 bench_tf32x3.py --small-k) 2>&1 | tee $OUT/small-k.log | tail -30
(cd bench && timeout 150 python3 profile_realistic.py --tasks unseen/convnext_block,unseen/efficientnet_mbconv --families triton-template) 2>&1 > $OUT/profile2.log; tail -8 $OUT/profile2.log
