"""PatchTST/42 (Nie et al. 2023, "A Time Series is Worth 64 Words") supervised
long-horizon forecaster, full model, following the official yuqinie98/PatchTST repo:
PatchTST_supervised/layers/PatchTST_backbone.py (PatchTST_backbone, TSTiEncoder,
TSTEncoder, TSTEncoderLayer, _MultiheadAttention, _ScaledDotProductAttention,
Flatten_Head) and layers/RevIN.py.

Channel-independent patching: RevIN normalisation, end replication padding, unfold
into 42 patches of length 16 (stride 8), linear patch embedding to d_model 128 plus a
learned positional embedding, 3 post-norm encoder layers whose norms are BatchNorm1d
over d_model (the repo's default norm='BatchNorm'), 16-head attention with residual
attention scores carried between layers (res_attention=True), GELU FFN 128-256-128,
then a flatten head to the 96-step horizon and RevIN de-normalisation.
Shapes: Traffic dataset config (scripts/PatchTST/traffic.sh): 862 variables,
look-back 336, horizon 96; evaluation batch 8 (the script uses 24; shrunk to keep
the task ~1-30 ms) -> 6896 channel series x 42 patches. Input (8, 336, 862) ->
output (8, 96, 862). Rough cost: ~250 GFLOP.

BatchNorm running statistics come from a calibration pass in __init__ (one forward of
a random batch of 1 with BatchNorm in train mode and momentum 1.0), then eval.
Other weights use PyTorch defaults; W_pos is uniform(-0.02, 0.02) as
positional_encoding('zeros', learn_pe=True) does. Dropout (0.2) is inactive in eval.
Departures: the PatchTST wrapper model (models/PatchTST.py) permutes x to
[bs, nvars, seq_len] before and after the backbone; that is done in forward here.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
ENC_IN = 862
SEQ_LEN = 336
PRED_LEN = 96
PATCH_LEN = 16
STRIDE = 8
N_LAYERS = 3
D_MODEL = 128
N_HEADS = 16
D_FF = 256
DROPOUT = 0.2
FC_DROPOUT = 0.2
HEAD_DROPOUT = 0.0
CALIB_BATCH = 1


class Transpose(nn.Module):
    def __init__(self, *dims, contiguous=False):
        super().__init__()
        self.dims, self.contiguous = dims, contiguous

    def forward(self, x):
        if self.contiguous:
            return x.transpose(*self.dims).contiguous()
        else:
            return x.transpose(*self.dims)


def get_activation_fn(activation):
    if callable(activation):
        return activation()
    elif activation.lower() == "relu":
        return nn.ReLU()
    elif activation.lower() == "gelu":
        return nn.GELU()
    raise ValueError(f'{activation} is not available. You can use "relu", "gelu", or a callable')


def positional_encoding(pe, learn_pe, q_len, d_model):
    if pe == "zeros":
        W_pos = torch.empty((q_len, d_model))
        nn.init.uniform_(W_pos, -0.02, 0.02)
    else:
        raise ValueError(pe)
    return nn.Parameter(W_pos, requires_grad=learn_pe)


class RevIN(nn.Module):
    def __init__(self, num_features, eps=1e-5, affine=True, subtract_last=False):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.affine = affine
        self.subtract_last = subtract_last
        if self.affine:
            self._init_params()

    def forward(self, x, mode):
        if mode == "norm":
            self._get_statistics(x)
            x = self._normalize(x)
        elif mode == "denorm":
            x = self._denormalize(x)
        else:
            raise NotImplementedError
        return x

    def _init_params(self):
        self.affine_weight = nn.Parameter(torch.ones(self.num_features))
        self.affine_bias = nn.Parameter(torch.zeros(self.num_features))

    def _get_statistics(self, x):
        dim2reduce = tuple(range(1, x.ndim - 1))
        if self.subtract_last:
            self.last = x[:, -1, :].unsqueeze(1)
        else:
            self.mean = torch.mean(x, dim=dim2reduce, keepdim=True).detach()
        self.stdev = torch.sqrt(
            torch.var(x, dim=dim2reduce, keepdim=True, unbiased=False) + self.eps
        ).detach()

    def _normalize(self, x):
        if self.subtract_last:
            x = x - self.last
        else:
            x = x - self.mean
        x = x / self.stdev
        if self.affine:
            x = x * self.affine_weight
            x = x + self.affine_bias
        return x

    def _denormalize(self, x):
        if self.affine:
            x = x - self.affine_bias
            x = x / (self.affine_weight + self.eps * self.eps)
        x = x * self.stdev
        if self.subtract_last:
            x = x + self.last
        else:
            x = x + self.mean
        return x


class _ScaledDotProductAttention(nn.Module):
    def __init__(self, d_model, n_heads, attn_dropout=0.0, res_attention=False, lsa=False):
        super().__init__()
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.res_attention = res_attention
        head_dim = d_model // n_heads
        self.scale = nn.Parameter(torch.tensor(head_dim**-0.5), requires_grad=lsa)
        self.lsa = lsa

    def forward(self, q, k, v, prev=None, key_padding_mask=None, attn_mask=None):
        attn_scores = torch.matmul(q, k) * self.scale
        if prev is not None:
            attn_scores = attn_scores + prev
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                attn_scores.masked_fill_(attn_mask, -math.inf)
            else:
                attn_scores += attn_mask
        if key_padding_mask is not None:
            attn_scores.masked_fill_(key_padding_mask.unsqueeze(1).unsqueeze(2), -math.inf)
        attn_weights = F.softmax(attn_scores, dim=-1)
        attn_weights = self.attn_dropout(attn_weights)
        output = torch.matmul(attn_weights, v)
        if self.res_attention:
            return output, attn_weights, attn_scores
        else:
            return output, attn_weights


class _MultiheadAttention(nn.Module):
    def __init__(
        self,
        d_model,
        n_heads,
        d_k=None,
        d_v=None,
        res_attention=False,
        attn_dropout=0.0,
        proj_dropout=0.0,
        qkv_bias=True,
        lsa=False,
    ):
        super().__init__()
        d_k = d_model // n_heads if d_k is None else d_k
        d_v = d_model // n_heads if d_v is None else d_v
        self.n_heads, self.d_k, self.d_v = n_heads, d_k, d_v
        self.W_Q = nn.Linear(d_model, d_k * n_heads, bias=qkv_bias)
        self.W_K = nn.Linear(d_model, d_k * n_heads, bias=qkv_bias)
        self.W_V = nn.Linear(d_model, d_v * n_heads, bias=qkv_bias)
        self.res_attention = res_attention
        self.sdp_attn = _ScaledDotProductAttention(
            d_model, n_heads, attn_dropout=attn_dropout, res_attention=self.res_attention, lsa=lsa
        )
        self.to_out = nn.Sequential(nn.Linear(n_heads * d_v, d_model), nn.Dropout(proj_dropout))

    def forward(self, Q, K=None, V=None, prev=None, key_padding_mask=None, attn_mask=None):
        bs = Q.size(0)
        if K is None:
            K = Q
        if V is None:
            V = Q
        q_s = self.W_Q(Q).view(bs, -1, self.n_heads, self.d_k).transpose(1, 2)
        k_s = self.W_K(K).view(bs, -1, self.n_heads, self.d_k).permute(0, 2, 3, 1)
        v_s = self.W_V(V).view(bs, -1, self.n_heads, self.d_v).transpose(1, 2)
        if self.res_attention:
            output, attn_weights, attn_scores = self.sdp_attn(
                q_s, k_s, v_s, prev=prev, key_padding_mask=key_padding_mask, attn_mask=attn_mask
            )
        else:
            output, attn_weights = self.sdp_attn(
                q_s, k_s, v_s, key_padding_mask=key_padding_mask, attn_mask=attn_mask
            )
        output = output.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * self.d_v)
        output = self.to_out(output)
        if self.res_attention:
            return output, attn_weights, attn_scores
        else:
            return output, attn_weights


class TSTEncoderLayer(nn.Module):
    def __init__(
        self,
        q_len,
        d_model,
        n_heads,
        d_k=None,
        d_v=None,
        d_ff=256,
        store_attn=False,
        norm="BatchNorm",
        attn_dropout=0,
        dropout=0.0,
        bias=True,
        activation="gelu",
        res_attention=False,
        pre_norm=False,
    ):
        super().__init__()
        assert not d_model % n_heads
        d_k = d_model // n_heads if d_k is None else d_k
        d_v = d_model // n_heads if d_v is None else d_v
        self.res_attention = res_attention
        self.self_attn = _MultiheadAttention(
            d_model,
            n_heads,
            d_k,
            d_v,
            attn_dropout=attn_dropout,
            proj_dropout=dropout,
            res_attention=res_attention,
        )
        self.dropout_attn = nn.Dropout(dropout)
        if "batch" in norm.lower():
            self.norm_attn = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(d_model), Transpose(1, 2))
        else:
            self.norm_attn = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff, bias=bias),
            get_activation_fn(activation),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model, bias=bias),
        )
        self.dropout_ffn = nn.Dropout(dropout)
        if "batch" in norm.lower():
            self.norm_ffn = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(d_model), Transpose(1, 2))
        else:
            self.norm_ffn = nn.LayerNorm(d_model)
        self.pre_norm = pre_norm
        self.store_attn = store_attn

    def forward(self, src, prev=None, key_padding_mask=None, attn_mask=None):
        if self.pre_norm:
            src = self.norm_attn(src)
        if self.res_attention:
            src2, attn, scores = self.self_attn(
                src, src, src, prev, key_padding_mask=key_padding_mask, attn_mask=attn_mask
            )
        else:
            src2, attn = self.self_attn(src, src, src, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
        if self.store_attn:
            self.attn = attn
        src = src + self.dropout_attn(src2)
        if not self.pre_norm:
            src = self.norm_attn(src)
        if self.pre_norm:
            src = self.norm_ffn(src)
        src2 = self.ff(src)
        src = src + self.dropout_ffn(src2)
        if not self.pre_norm:
            src = self.norm_ffn(src)
        if self.res_attention:
            return src, scores
        else:
            return src


class TSTEncoder(nn.Module):
    def __init__(
        self,
        q_len,
        d_model,
        n_heads,
        d_k=None,
        d_v=None,
        d_ff=None,
        norm="BatchNorm",
        attn_dropout=0.0,
        dropout=0.0,
        activation="gelu",
        res_attention=False,
        n_layers=1,
        pre_norm=False,
        store_attn=False,
    ):
        super().__init__()
        self.layers = nn.ModuleList(
            [
                TSTEncoderLayer(
                    q_len,
                    d_model,
                    n_heads=n_heads,
                    d_k=d_k,
                    d_v=d_v,
                    d_ff=d_ff,
                    norm=norm,
                    attn_dropout=attn_dropout,
                    dropout=dropout,
                    activation=activation,
                    res_attention=res_attention,
                    pre_norm=pre_norm,
                    store_attn=store_attn,
                )
                for i in range(n_layers)
            ]
        )
        self.res_attention = res_attention

    def forward(self, src, key_padding_mask=None, attn_mask=None):
        output = src
        scores = None
        if self.res_attention:
            for mod in self.layers:
                output, scores = mod(
                    output, prev=scores, key_padding_mask=key_padding_mask, attn_mask=attn_mask
                )
            return output
        else:
            for mod in self.layers:
                output = mod(output, key_padding_mask=key_padding_mask, attn_mask=attn_mask)
            return output


class TSTiEncoder(nn.Module):
    def __init__(
        self,
        c_in,
        patch_num,
        patch_len,
        n_layers=3,
        d_model=128,
        n_heads=16,
        d_k=None,
        d_v=None,
        d_ff=256,
        norm="BatchNorm",
        attn_dropout=0.0,
        dropout=0.0,
        act="gelu",
        store_attn=False,
        res_attention=True,
        pre_norm=False,
        pe="zeros",
        learn_pe=True,
    ):
        super().__init__()
        self.patch_num = patch_num
        self.patch_len = patch_len
        q_len = patch_num
        self.W_P = nn.Linear(patch_len, d_model)
        self.seq_len = q_len
        self.W_pos = positional_encoding(pe, learn_pe, q_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.encoder = TSTEncoder(
            q_len,
            d_model,
            n_heads,
            d_k=d_k,
            d_v=d_v,
            d_ff=d_ff,
            norm=norm,
            attn_dropout=attn_dropout,
            dropout=dropout,
            pre_norm=pre_norm,
            activation=act,
            res_attention=res_attention,
            n_layers=n_layers,
            store_attn=store_attn,
        )

    def forward(self, x):
        n_vars = x.shape[1]
        x = x.permute(0, 1, 3, 2)  # [bs x nvars x patch_num x patch_len]
        x = self.W_P(x)  # [bs x nvars x patch_num x d_model]
        u = torch.reshape(x, (x.shape[0] * x.shape[1], x.shape[2], x.shape[3]))
        u = self.dropout(u + self.W_pos)
        z = self.encoder(u)  # [bs * nvars x patch_num x d_model]
        z = torch.reshape(z, (-1, n_vars, z.shape[-2], z.shape[-1]))
        z = z.permute(0, 1, 3, 2)  # [bs x nvars x d_model x patch_num]
        return z


class Flatten_Head(nn.Module):
    def __init__(self, individual, n_vars, nf, target_window, head_dropout=0):
        super().__init__()
        self.individual = individual
        self.n_vars = n_vars
        self.flatten = nn.Flatten(start_dim=-2)
        self.linear = nn.Linear(nf, target_window)
        self.dropout = nn.Dropout(head_dropout)

    def forward(self, x):
        x = self.flatten(x)
        x = self.linear(x)
        x = self.dropout(x)
        return x


class PatchTST_backbone(nn.Module):
    def __init__(
        self,
        c_in,
        context_window,
        target_window,
        patch_len,
        stride,
        n_layers=3,
        d_model=128,
        n_heads=16,
        d_ff=256,
        norm="BatchNorm",
        attn_dropout=0.0,
        dropout=0.0,
        act="gelu",
        res_attention=True,
        pre_norm=False,
        pe="zeros",
        learn_pe=True,
        head_dropout=0,
        padding_patch=None,
        individual=False,
        revin=True,
        affine=True,
        subtract_last=False,
    ):
        super().__init__()
        self.revin = revin
        if self.revin:
            self.revin_layer = RevIN(c_in, affine=affine, subtract_last=subtract_last)
        self.patch_len = patch_len
        self.stride = stride
        self.padding_patch = padding_patch
        patch_num = int((context_window - patch_len) / stride + 1)
        if padding_patch == "end":
            self.padding_patch_layer = nn.ReplicationPad1d((0, stride))
            patch_num += 1
        self.backbone = TSTiEncoder(
            c_in,
            patch_num=patch_num,
            patch_len=patch_len,
            n_layers=n_layers,
            d_model=d_model,
            n_heads=n_heads,
            d_ff=d_ff,
            attn_dropout=attn_dropout,
            dropout=dropout,
            act=act,
            res_attention=res_attention,
            pre_norm=pre_norm,
            pe=pe,
            learn_pe=learn_pe,
            norm=norm,
        )
        self.head_nf = d_model * patch_num
        self.n_vars = c_in
        self.individual = individual
        self.head = Flatten_Head(
            self.individual, self.n_vars, self.head_nf, target_window, head_dropout=head_dropout
        )

    def forward(self, z):  # z: [bs x nvars x seq_len]
        if self.revin:
            z = z.permute(0, 2, 1)
            z = self.revin_layer(z, "norm")
            z = z.permute(0, 2, 1)
        if self.padding_patch == "end":
            z = self.padding_patch_layer(z)
        z = z.unfold(
            dimension=-1, size=self.patch_len, step=self.stride
        )  # [bs x nvars x patch_num x patch_len]
        z = z.permute(0, 1, 3, 2)  # [bs x nvars x patch_len x patch_num]
        z = self.backbone(z)  # [bs x nvars x d_model x patch_num]
        z = self.head(z)  # [bs x nvars x target_window]
        if self.revin:
            z = z.permute(0, 2, 1)
            z = self.revin_layer(z, "denorm")
            z = z.permute(0, 2, 1)
        return z


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = PatchTST_backbone(
            c_in=ENC_IN,
            context_window=SEQ_LEN,
            target_window=PRED_LEN,
            patch_len=PATCH_LEN,
            stride=STRIDE,
            n_layers=N_LAYERS,
            d_model=D_MODEL,
            n_heads=N_HEADS,
            d_ff=D_FF,
            norm="BatchNorm",
            attn_dropout=0.0,
            dropout=DROPOUT,
            act="gelu",
            res_attention=True,
            pre_norm=False,
            pe="zeros",
            learn_pe=True,
            head_dropout=HEAD_DROPOUT,
            padding_patch="end",
            individual=False,
            revin=True,
            affine=False,
            subtract_last=False,
        )
        self._calibrate_batchnorm()
        self.eval()

    def _calibrate_batchnorm(self):
        bns = [m for m in self.modules() if isinstance(m, nn.BatchNorm1d)]
        self.eval()
        for m in bns:
            m.reset_running_stats()
            m.momentum = 1.0
            m.train()
        with torch.no_grad():
            self.forward(torch.randn(CALIB_BATCH, SEQ_LEN, ENC_IN))
        for m in bns:
            m.momentum = 0.1
            m.eval()

    def forward(self, x):  # x: [Batch, Input length, Channel]
        x = x.permute(0, 2, 1)  # x: [Batch, Channel, Input length]
        x = self.model(x)
        x = x.permute(0, 2, 1)  # x: [Batch, Output length, Channel]
        return x


def get_inputs():
    # per-variable level/scale differences and a daily-like periodic component
    t = torch.arange(SEQ_LEN, dtype=torch.float32).view(1, SEQ_LEN, 1)
    phase = torch.rand(BATCH, 1, ENC_IN) * 2 * math.pi
    level = torch.rand(1, 1, ENC_IN) * 0.1
    x = level + 0.05 * torch.sin(2 * math.pi * t / 24.0 + phase) + 0.02 * torch.randn(BATCH, SEQ_LEN, ENC_IN)
    return [x]


def get_init_inputs():
    return []
