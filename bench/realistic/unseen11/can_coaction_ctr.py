"""CAN (Co-Action Network) CTR model: embedding gathers + co-action units + PReLU MLP.

Model / block
    CAN ("CAN: Feature Co-Action for Click-Through Rate Prediction", Bian et
    al., WSDM 2022, Alibaba display ads), the `Model_DNN(use_coaction=True)`
    variant of the official code, on the Amazon-Books setting.  Embedding
    lookups for user / item / category / 100-long behaviour history; for the
    item and the category, a co-action unit: the target's 160-d "MLP
    embedding" is reshaped per example into the weights of a tiny 16->8->4 MLP
    (per-sample weight matrices), applied with batched matmuls and tanh to
    the 1st, 2nd and 3rd powers of every history item's 16-d input embedding,
    masked and sum-pooled over the history.  These co-action features are
    concatenated with the plain embeddings and fed to BN -> 200 -> PReLU -> 80
    -> PReLU -> 1 -> sigmoid.

Upstream code followed
    github.com/CAN-Paper/Co-Action-Network, `script/model.py` (TensorFlow 1.x):
    module constants weight_emb_w = [[16, 8], [8, 4]], weight_emb_b = [0, 0],
    orders = 3, order_indep = False; function gen_coaction (mode "can");
    class Model (embedding layer, co-action branch, item_eb / item_his_eb_sum,
    build_fcn_net with prelu, build_loss's sigmoid); class Model_DNN.  It is
    transcribed op by op to PyTorch (tf.nn.embedding_lookup -> nn.Embedding,
    tf.reshape/matmul/tanh/concat/reduce_sum -> torch equivalents,
    tf.layers.dense -> nn.Linear, tf.layers.batch_normalization -> BatchNorm1d
    with TF's eps 1e-3, utils.prelu -> max(0,x) + alpha*min(0,x) with alpha
    initialised to 0.1).  As upstream, the plain history sum is not masked;
    only the co-action output is.

Use case and shapes
    Ranking 8192 candidates per call with the Amazon-Books vocabulary used by
    DIEN/CAN (603,668 users, 367,983 items, 1,601 categories), EMBEDDING_DIM
    18, history length 100 (maxlen of the public pipeline), padded histories
    (id 0, mask 0) with random lengths 1..100.

    inputs : uid, mid, cate int64 (8192,); mid_his, cate_his int64 (8192, 100);
             mask float32 (8192, 100)
    output : float32 (8192, 1) click probability

Cost (rough)
    Parameters 82.6 M (330 MB fp32): item tables 367,983 x (18 + 160 + 16)
    = 71.4 M, user table 10.9 M, the MLP 49 k.
    FLOPs: co-action per example and feature: 3 orders x 100 x (16*8 + 8*4)
    MAC = 48 k MAC, x2 features -> 0.19 MFLOP; MLP 162*200 + 200*80 + 80
    -> 0.1 MFLOP; ~0.3 MFLOP x 8192 = 2.5 GFLOP (compute is negligible).
    Bytes: gathers 8192*100*(18+18+16+16)*4 = 223 MB plus 2 x 8192*160*4 and
    the per-order (8192, 100, 8/4) intermediates and powers, the (8192, 100, 36)
    concat and mask multiply: ~1.5 GB moved over ~70 small kernels
    (~1 ms on an H100, launch and memory bound).

Departures:
    - Weights: TF's glorot-uniform embedding init gives ~1e-3-scale entries for
      300k-row tables, which makes every co-action term ~0; here the user /
      item / category embeddings are N(0, 0.5^2), the co-action input
      embeddings N(0, 0.5^2) and the co-action weight ("MLP") embeddings
      N(0, 0.5^2).  Dense layers keep glorot-uniform weights; their zero biases
      are set to U(-0.05, 0.05).
    - BatchNorm1d (bn1) running statistics are calibrated in __init__ with one
      train-mode pass (momentum=None) over a fixed-seed batch of 2048 examples;
      then its affine parameters are set to 1 + U(-0.2, 0.2) / U(-0.1, 0.1).
      (In the upstream TF graph bn1 is built with training=False, i.e. it
      only ever uses its initial moving statistics.)
    - Only the inference graph: no loss / optimizer / aux nets; the carte
      (cartesian-product embedding) branch is off (use_cartes=False), as in
      the CAN configuration.
"""
# ruff: noqa: B007, B905  (the upstream code's loops kept as written)

import torch
import torch.nn as nn

#### CAN config #####
WEIGHT_EMB_W = [[16, 8], [8, 4]]
WEIGHT_EMB_B = [0, 0]
ORDERS = 3
ORDER_INDEP = False  # True
WEIGHT_EMB_DIM = sum([w[0] * w[1] for w in WEIGHT_EMB_W]) + sum(WEIGHT_EMB_B)  # * orders
INDEP_NUM = 1
if ORDER_INDEP:
    INDEP_NUM *= ORDERS
CALC_MODE = "can"
#### CAN config #####

N_UID = 603668
N_MID = 367983
N_CATE = 1601
EMBEDDING_DIM = 18
EMB_STD = 0.5

BATCH = 8192
MAXLEN = 100
CALIB_BATCH = 2048


def gen_coaction(ad, his_items, dim, mode="can", mask=None):
    idx = 0
    weight_orders = []
    bias_orders = []
    for i in range(ORDERS):
        weight, bias = [], []
        for w, b in zip(WEIGHT_EMB_W, WEIGHT_EMB_B):
            weight.append(torch.reshape(ad[:, idx : idx + w[0] * w[1]], [-1, w[0], w[1]]))
            idx += w[0] * w[1]
            if b == 0:
                bias.append(None)
            else:
                bias.append(torch.reshape(ad[:, idx : idx + b], [-1, 1, b]))
                idx += b
        weight_orders.append(weight)
        bias_orders.append(bias)
        if not ORDER_INDEP:
            break

    if mode == "can":
        out_seq = []
        hh = []
        for i in range(ORDERS):
            hh.append(his_items ** (i + 1))
        # hh = [sum(hh)]
        for i, h in enumerate(hh):
            if ORDER_INDEP:
                weight, bias = weight_orders[i], bias_orders[i]
            else:
                weight, bias = weight_orders[0], bias_orders[0]
            for j, (w, b) in enumerate(zip(weight, bias)):
                h = torch.matmul(h, w)
                if b is not None:
                    h = h + b
                if j != len(weight) - 1:
                    h = torch.tanh(h)
                out_seq.append(h)
        out_seq = torch.cat(out_seq, 2)
        if mask is not None:
            mask = torch.unsqueeze(mask, dim=-1)
            out_seq = out_seq * mask
    out = torch.sum(out_seq, 1)
    return out, None


class PReLU(nn.Module):
    """utils.prelu: tf.maximum(0.0, _x) + _alpha * tf.minimum(0.0, _x), alpha initialised to 0.1."""

    def __init__(self, num_features):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((num_features,), 0.1))

    def forward(self, _x):
        return torch.clamp_min(_x, 0.0) + self.alpha * torch.clamp_max(_x, 0.0)


class CANModelDNN(nn.Module):
    def __init__(self, n_uid, n_mid, n_cate, embedding_dim):
        super().__init__()
        # Embedding layer
        self.uid_embeddings_var = nn.Embedding(n_uid, embedding_dim)
        self.mid_embeddings_var = nn.Embedding(n_mid, embedding_dim)
        self.cate_embeddings_var = nn.Embedding(n_cate, embedding_dim)
        ###  co-action ###
        self.item_mlp_embeddings_var = nn.Embedding(n_mid, INDEP_NUM * WEIGHT_EMB_DIM)
        self.cate_mlp_embeddings_var = nn.Embedding(n_cate, INDEP_NUM * WEIGHT_EMB_DIM)
        self.item_input_embeddings_var = nn.Embedding(n_mid, WEIGHT_EMB_W[0][0] * INDEP_NUM)
        self.cate_input_embeddings_var = nn.Embedding(n_cate, WEIGHT_EMB_W[0][0] * INDEP_NUM)

        inp_dim = (
            embedding_dim
            + 2 * embedding_dim
            + 2 * embedding_dim
            + 2 * ORDERS * sum(w[1] for w in WEIGHT_EMB_W)
        )
        # build_fcn_net
        self.bn1 = nn.BatchNorm1d(inp_dim, eps=1e-3, momentum=0.01)
        self.f1 = nn.Linear(inp_dim, 200)
        self.prelu1 = PReLU(200)
        self.f2 = nn.Linear(200, 80)
        self.prelu2 = PReLU(80)
        self.f3 = nn.Linear(80, 1)  # use_softmax = False -> 1 output
        self.embedding_dim = embedding_dim

    def build_fcn_net(self, inp):
        bn1 = self.bn1(inp)
        dnn1 = self.f1(bn1)
        dnn1 = self.prelu1(dnn1)
        dnn2 = self.f2(dnn1)
        dnn2 = self.prelu2(dnn2)
        dnn3 = self.f3(dnn2)
        return dnn3

    def forward(self, uid_batch_ph, mid_batch_ph, cate_batch_ph, mid_his_batch_ph, cate_his_batch_ph, mask):
        uid_batch_embedded = self.uid_embeddings_var(uid_batch_ph)
        mid_batch_embedded = self.mid_embeddings_var(mid_batch_ph)
        mid_his_batch_embedded = self.mid_embeddings_var(mid_his_batch_ph)
        cate_batch_embedded = self.cate_embeddings_var(cate_batch_ph)
        cate_his_batch_embedded = self.cate_embeddings_var(cate_his_batch_ph)

        mlp_batch_embedded = []
        mlp_batch_embedded.append(self.item_mlp_embeddings_var(mid_batch_ph))
        mlp_batch_embedded.append(self.cate_mlp_embeddings_var(cate_batch_ph))
        input_batch_embedded = []
        input_batch_embedded.append(self.item_input_embeddings_var(mid_his_batch_ph))
        input_batch_embedded.append(self.cate_input_embeddings_var(cate_his_batch_ph))

        item_eb = torch.cat([mid_batch_embedded, cate_batch_embedded], 1)
        item_his_eb = torch.cat([mid_his_batch_embedded, cate_his_batch_embedded], 2)
        item_his_eb_sum = torch.sum(item_his_eb, 1)

        cross = []
        tmp_sum, tmp_seq = [], []
        for i, (mlp_batch, input_batch) in enumerate(zip(mlp_batch_embedded, input_batch_embedded)):
            coaction_sum, coaction_seq = gen_coaction(
                mlp_batch[:, : INDEP_NUM * WEIGHT_EMB_DIM],
                input_batch[:, :, : WEIGHT_EMB_W[0][0]],
                self.embedding_dim,
                mode=CALC_MODE,
                mask=mask,
            )
            tmp_sum.append(coaction_sum)
            tmp_seq.append(coaction_seq)
        coaction_sum = torch.cat(tmp_sum, dim=1)
        cross.append(coaction_sum)

        # Model_DNN
        inp = torch.cat([uid_batch_embedded, item_eb, item_his_eb_sum] + cross, 1)
        logit = self.build_fcn_net(inp)
        # build_loss: y_hat = sigmoid(inp) (use_softmax = False)
        y_hat = torch.sigmoid(logit)
        return y_hat


def _make_batch(batch, generator=None):
    uid = torch.randint(0, N_UID, (batch,), generator=generator)
    mid = torch.randint(1, N_MID, (batch,), generator=generator)
    cate = torch.randint(1, N_CATE, (batch,), generator=generator)
    lengths = torch.randint(1, MAXLEN + 1, (batch,), generator=generator)
    mask = (torch.arange(MAXLEN)[None, :] < lengths[:, None]).to(torch.float32)
    # padded history positions hold id 0, as in the upstream data iterator
    mid_his = torch.randint(1, N_MID, (batch, MAXLEN), generator=generator) * mask.long()
    cate_his = torch.randint(1, N_CATE, (batch, MAXLEN), generator=generator) * mask.long()
    return [uid, mid, cate, mid_his, cate_his, mask]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = CANModelDNN(N_UID, N_MID, N_CATE, EMBEDDING_DIM)
        with torch.no_grad():
            for m in self.net.modules():
                if isinstance(m, nn.Embedding):
                    m.weight.normal_(0.0, EMB_STD)
                elif isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)  # tf glorot_uniform
                    m.bias.uniform_(-0.05, 0.05)
        self._calibrate_bn()
        self.eval()

    @torch.no_grad()
    def _calibrate_bn(self):
        bn = self.net.bn1
        bn.reset_running_stats()
        bn.momentum = None
        g = torch.Generator().manual_seed(1234)
        self.train()
        self.net(*_make_batch(CALIB_BATCH, generator=g))
        bn.momentum = 0.01
        bn.weight.add_(torch.empty_like(bn.weight).uniform_(-0.2, 0.2))
        bn.bias.uniform_(-0.1, 0.1)

    def forward(self, uid, mid, cate, mid_his, cate_his, mask):
        return self.net(uid, mid, cate, mid_his, cate_his, mask)


def get_inputs():
    return _make_batch(BATCH)


def get_init_inputs():
    return []
