set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation . 2>&1 | grep -v WARNING | tail -1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
date -u
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_tf32x3_conv.py tests/test_depthwise.py 2>&1 | tail -5
(cd bench && timeout 150 python3 bench_templates.py --match depthwise) 2>&1 | tee $OUT/templates-depthwise.log | tail -25
(cd bench && timeout 330 python3 profile_realistic.py --families tf32x3-conv,triton-template) 2>&1 | tee $OUT/profile.log | tail -150
