"""DIEN (Deep Interest Evolution Network, Zhou et al. 2019) inference path, a PyTorch port of the
reference code (mouna99/dien, model.py Model_DIN_V2_Gru_Vec_attGru_Neg; utils.py din_fcn_attention
and VecAttGRUCell) on the Amazon Books configuration: uid / item / category embeddings of 18,
item = [mid_emb, cat_emb] (36), 100-step behaviour history with a padding mask.
1) interest extractor: GRU(36, 36) over the history (nn.GRU; padded steps are later masked out);
2) din_fcn_attention (mode LIST, softmax_stag 1): query dense 36 -> 36 + PReLU(alpha 0.1), tiled,
   [q, facts, q - facts, q * facts] -> 80 sigmoid -> 40 sigmoid -> 1, masked with -2**32 + 1,
   softmax over time; 3) interest evolving: AUGRU (VecAttGRUCell: update gate scaled by
   (1 - att_score), gate bias initialised to 1) unrolled over time the way dynamic_rnn with
   sequence_length does (state frozen past each length); 4) build_fcn_net on
   [uid, item, sum(history) (unmasked, as the reference sums padded slots too), item * sum,
   final AUGRU state]: BN -> 200 Dice -> 80 Dice -> 2 -> softmax + 1e-8. Dice follows
   DeepCTR-Torch (BatchNorm1d(eps 1e-8) in eval mode, alpha per channel).
Use case: CTR ranking of 1024 candidate (user, item) pairs."""

import torch
import torch.nn as nn

EMBEDDING_DIM = 18
HIDDEN_SIZE = 18 * 2
ATTENTION_SIZE = 18 * 2
N_UID, N_MID, N_CAT = 543060, 367983, 1601
BATCH, MAXLEN = 1024, 100


class Dice(nn.Module):
    def __init__(self, emb_size, dim=2, epsilon=1e-8):
        super().__init__()
        assert dim == 2 or dim == 3
        self.bn = nn.BatchNorm1d(emb_size, eps=epsilon)
        self.sigmoid = nn.Sigmoid()
        self.dim = dim
        # wrap alpha in nn.Parameter to make it trainable
        if self.dim == 2:
            self.alpha = nn.Parameter(torch.zeros((emb_size,)))
        else:
            self.alpha = nn.Parameter(torch.zeros((emb_size, 1)))

    def forward(self, x):
        assert x.dim() == self.dim
        if self.dim == 2:
            x_p = self.sigmoid(self.bn(x))
            out = self.alpha * (1 - x_p) * x + x_p * x
        else:
            x = torch.transpose(x, 1, 2)
            x_p = self.sigmoid(self.bn(x))
            out = self.alpha * (1 - x_p) * x + x_p * x
            out = torch.transpose(out, 1, 2)
        return out


class DinFcnAttention(nn.Module):
    """din_fcn_attention(query, facts, ATTENTION_SIZE, mask, softmax_stag=1, mode='LIST', return_alphas=True)"""

    def __init__(self, query_size, facts_size):
        super().__init__()
        self.f1 = nn.Linear(query_size, facts_size)
        self.prelu = nn.PReLU(facts_size, init=0.1)
        self.f1_att = nn.Linear(facts_size * 4, 80)
        self.f2_att = nn.Linear(80, 40)
        self.f3_att = nn.Linear(40, 1)

    def forward(self, query, facts, mask):
        mask = torch.eq(mask, torch.ones_like(mask))
        query = self.f1(query)
        query = self.prelu(query)
        queries = query.repeat(1, facts.shape[1])
        queries = queries.reshape(facts.shape)
        din_all = torch.cat([queries, facts, queries - facts, queries * facts], dim=-1)
        d_layer_1_all = torch.sigmoid(self.f1_att(din_all))
        d_layer_2_all = torch.sigmoid(self.f2_att(d_layer_1_all))
        d_layer_3_all = self.f3_att(d_layer_2_all)
        d_layer_3_all = d_layer_3_all.reshape(-1, 1, facts.shape[1])
        scores = d_layer_3_all
        # Mask
        key_masks = mask.unsqueeze(1)  # [B, 1, T]
        paddings = torch.ones_like(scores) * (-(2**32) + 1)
        scores = torch.where(key_masks, scores, paddings)  # [B, 1, T]
        # Activation
        scores = torch.softmax(scores, dim=-1)  # [B, 1, T]
        # Weighted sum (mode LIST)
        scores = scores.reshape(-1, facts.shape[1])
        output = facts * scores.unsqueeze(-1)
        output = output.reshape(facts.shape)
        return output, scores


class VecAttGRUCell(nn.Module):
    def __init__(self, input_size, num_units):
        super().__init__()
        self._num_units = num_units
        self._gate_linear = nn.Linear(input_size + num_units, 2 * num_units)
        self._candidate_linear = nn.Linear(input_size + num_units, num_units)
        with torch.no_grad():  # bias_initializer=constant(1.0) for the gates
            self._gate_linear.bias.fill_(1.0)

    def forward(self, inputs, state, att_score):
        value = torch.sigmoid(self._gate_linear(torch.cat([inputs, state], 1)))
        r, u = torch.split(value, self._num_units, dim=1)
        r_state = r * state
        c = torch.tanh(self._candidate_linear(torch.cat([inputs, r_state], 1)))
        u = (1.0 - att_score) * u
        new_h = u * state + (1 - u) * c
        return new_h, new_h


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.uid_embeddings_var = nn.Embedding(N_UID, EMBEDDING_DIM)
        self.mid_embeddings_var = nn.Embedding(N_MID, EMBEDDING_DIM)
        self.cat_embeddings_var = nn.Embedding(N_CAT, EMBEDDING_DIM)
        self.gru1 = nn.GRU(input_size=HIDDEN_SIZE, hidden_size=HIDDEN_SIZE, batch_first=True)
        self.attention = DinFcnAttention(HIDDEN_SIZE, HIDDEN_SIZE)
        self.gru2_cell = VecAttGRUCell(HIDDEN_SIZE, HIDDEN_SIZE)
        inp_dim = EMBEDDING_DIM + 4 * HIDDEN_SIZE
        self.bn1 = nn.BatchNorm1d(inp_dim, eps=1e-3, momentum=0.01)
        self.f1 = nn.Linear(inp_dim, 200)
        self.dice_1 = Dice(200)
        self.f2 = nn.Linear(200, 80)
        self.dice_2 = Dice(80)
        self.f3 = nn.Linear(80, 2)
        with torch.no_grad():  # trained-looking BatchNorm statistics / Dice alphas
            # inp = [uid 18 | item 36 | his_sum 36 | item * his_sum 36 | state 36]; the unmasked
            # history sum (padding rows included) has a much larger spread, the AUGRU state a small one
            his_sum = slice(EMBEDDING_DIM + HIDDEN_SIZE, EMBEDDING_DIM + 2 * HIDDEN_SIZE)
            his_prod = slice(EMBEDDING_DIM + 2 * HIDDEN_SIZE, EMBEDDING_DIM + 3 * HIDDEN_SIZE)
            self.bn1.running_var.uniform_(0.5, 1.5)
            self.bn1.running_var[his_sum].uniform_(500.0, 1000.0)
            self.bn1.running_var[his_prod].uniform_(2000.0, 4000.0)
            self.bn1.running_var[EMBEDDING_DIM + 3 * HIDDEN_SIZE :].uniform_(0.003, 0.008)  # AUGRU state
            self.bn1.weight.uniform_(0.5, 1.5)
            self.bn1.bias.uniform_(-0.1, 0.1)
            for d in (self.dice_1, self.dice_2):
                d.alpha.uniform_(-0.2, 0.3)
                d.bn.running_mean.uniform_(-0.2, 0.2)
                d.bn.running_var.uniform_(0.1, 0.4)
        self.eval()

    def dynamic_augru(self, inputs, att_scores, mask):
        # dynamic_rnn(VecAttGRUCell, inputs, att_scores, sequence_length): zero output and
        # copied-through state beyond each sequence's length
        batch, steps, _ = inputs.shape
        state = inputs.new_zeros(batch, self.gru2_cell._num_units)
        outputs = []
        for t in range(steps):
            new_h, _ = self.gru2_cell(inputs[:, t], state, att_scores[:, t])
            valid = mask[:, t].unsqueeze(1) > 0
            state = torch.where(valid, new_h, state)
            outputs.append(torch.where(valid, new_h, torch.zeros_like(new_h)))
        return torch.stack(outputs, 1), state

    def forward(self, uid_batch_ph, mid_batch_ph, cat_batch_ph, mid_his_batch_ph, cat_his_batch_ph, mask):
        uid_batch_embedded = self.uid_embeddings_var(uid_batch_ph)
        mid_batch_embedded = self.mid_embeddings_var(mid_batch_ph)
        mid_his_batch_embedded = self.mid_embeddings_var(mid_his_batch_ph)
        cat_batch_embedded = self.cat_embeddings_var(cat_batch_ph)
        cat_his_batch_embedded = self.cat_embeddings_var(cat_his_batch_ph)

        item_eb = torch.cat([mid_batch_embedded, cat_batch_embedded], 1)
        item_his_eb = torch.cat([mid_his_batch_embedded, cat_his_batch_embedded], 2)
        item_his_eb_sum = torch.sum(item_his_eb, 1)

        # RNN layer(-s)
        rnn_outputs, _ = self.gru1(item_his_eb)

        # Attention layer
        att_outputs, alphas = self.attention(item_eb, rnn_outputs, mask)

        rnn_outputs2, final_state2 = self.dynamic_augru(rnn_outputs, alphas.unsqueeze(-1), mask)

        inp = torch.cat(
            [uid_batch_embedded, item_eb, item_his_eb_sum, item_eb * item_his_eb_sum, final_state2], 1
        )
        # build_fcn_net(inp, use_dice=True)
        bn1 = self.bn1(inp)
        dnn1 = self.dice_1(self.f1(bn1))
        dnn2 = self.dice_2(self.f2(dnn1))
        dnn3 = self.f3(dnn2)
        y_hat = torch.softmax(dnn3, dim=-1) + 0.00000001
        return y_hat


def get_inputs():
    lengths = torch.randint(5, MAXLEN + 1, (BATCH,))
    mask = (torch.arange(MAXLEN)[None, :] < lengths[:, None]).float()
    uids = torch.randint(0, N_UID, (BATCH,))
    mids = torch.randint(1, N_MID, (BATCH,))
    cats = torch.randint(1, N_CAT, (BATCH,))
    mid_his = torch.randint(1, N_MID, (BATCH, MAXLEN)) * mask.long()  # padded slots hold id 0
    cat_his = torch.randint(1, N_CAT, (BATCH, MAXLEN)) * mask.long()
    return [uids, mids, cats, mid_his, cat_his, mask]


def get_init_inputs():
    return []
