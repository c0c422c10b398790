"""One RWKV-4 block (RWKV/rwkv-4-430m-pile, layer 12 of 24) as transformers writes it in
modeling_rwkv.py: RwkvBlock = ln1 -> RwkvSelfAttention (time-mix) -> residual, ln2 ->
RwkvFeedForward (channel-mix) -> residual. Time-mix builds key/value/receptance from the token and
its predecessor (time_shift = nn.ZeroPad2d((0, 0, 1, -1)), lerp with time_mix_* vectors), projects
them (1024 -> 1024, no bias), and runs the WKV linear attention with rwkv_linear_attention_cpu:
the per-token Python loop with the numerically-stable max_state trick (num/den/max states,
time_decay = -exp(time_decay), time_first bonus for the current token). That eager loop is the
path transformers takes whenever its custom CUDA kernel is not loaded. Channel-mix is
square(relu(key)) (1024 -> 4096) -> value (4096 -> 1024) gated by sigmoid(receptance).
time_* parameters follow RwkvPreTrainedModel._init_weights for this layer id.
Use case: prompt ingestion for 16 streams x 128 tokens, no incoming state."""

import math

import torch
import torch.nn as nn

HIDDEN_SIZE = 1024
ATTENTION_HIDDEN_SIZE = 1024
INTERMEDIATE_SIZE = 4096
NUM_HIDDEN_LAYERS = 24
LAYER_ID = 12
LAYER_NORM_EPSILON = 1e-5
BATCH, SEQ_LEN = 16, 128


def rwkv_linear_attention_cpu(time_decay, time_first, key, value, state=None, return_state=False):
    # For CPU fallback. Will be slower and probably take more memory than the custom CUDA kernel if not executed
    # within a torch.no_grad.
    _, seq_length, _ = key.size()
    output = torch.zeros_like(key)

    if state is None:
        num_state = torch.zeros_like(key[:, 0], dtype=torch.float32)
        den_state = torch.zeros_like(key[:, 0], dtype=torch.float32)
        max_state = torch.zeros_like(key[:, 0], dtype=torch.float32) - 1e38
    else:
        num_state, den_state, max_state = state
    # For numerical stability
    #    real_numerator_state = num_state * torch.exp(max_state)
    #    real_denominator_state = den_state * torch.exp(max_state)

    time_decay = -torch.exp(time_decay)

    for current_index in range(seq_length):
        current_key = key[:, current_index].float()
        current_value = value[:, current_index]

        # wkv computation at time t
        max_for_output = torch.maximum(max_state, current_key + time_first)
        e1 = torch.exp(max_state - max_for_output)
        e2 = torch.exp(current_key + time_first - max_for_output)
        numerator = e1 * num_state + e2 * current_value
        denominator = e1 * den_state + e2
        output[:, current_index] = (numerator / denominator).to(output.dtype)

        # Update state for next iteration
        max_for_state = torch.maximum(max_state + time_decay, current_key)
        e1 = torch.exp(max_state + time_decay - max_for_state)
        e2 = torch.exp(current_key - max_for_state)
        num_state = e1 * num_state + e2 * current_value
        den_state = e1 * den_state + e2
        max_state = max_for_state

    if return_state or state is not None:
        state = [num_state, den_state, max_state]

    return output, state


class RwkvSelfAttention(nn.Module):
    def __init__(self, layer_id=0):
        super().__init__()
        self.layer_id = layer_id
        hidden_size = HIDDEN_SIZE
        attention_hidden_size = ATTENTION_HIDDEN_SIZE
        self.attention_hidden_size = attention_hidden_size

        self.time_decay = nn.Parameter(torch.empty(attention_hidden_size))
        self.time_first = nn.Parameter(torch.empty(attention_hidden_size))

        self.time_mix_key = nn.Parameter(torch.empty(1, 1, hidden_size))
        self.time_mix_value = nn.Parameter(torch.empty(1, 1, hidden_size))
        self.time_mix_receptance = nn.Parameter(torch.empty(1, 1, hidden_size))

        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.key = nn.Linear(hidden_size, attention_hidden_size, bias=False)
        self.value = nn.Linear(hidden_size, attention_hidden_size, bias=False)
        self.receptance = nn.Linear(hidden_size, attention_hidden_size, bias=False)
        self.output = nn.Linear(attention_hidden_size, hidden_size, bias=False)

    def extract_key_value(self, hidden, state=None):
        # Mix hidden with the previous timestep to produce key, value, receptance
        if hidden.size(1) == 1 and state is not None:
            shifted = state[1][:, :, self.layer_id]
        else:
            shifted = self.time_shift(hidden)
            if state is not None:
                shifted[:, 0] = state[1][:, :, self.layer_id]
        key = hidden * self.time_mix_key + shifted * (1 - self.time_mix_key)
        value = hidden * self.time_mix_value + shifted * (1 - self.time_mix_value)
        receptance = hidden * self.time_mix_receptance + shifted * (1 - self.time_mix_receptance)

        key = self.key(key)
        value = self.value(value)
        receptance = torch.sigmoid(self.receptance(receptance))
        if state is not None:
            state[1][:, :, self.layer_id] = hidden[:, -1]
        return receptance, key, value, state

    def forward(self, hidden, state=None, use_cache=False):
        receptance, key, value, state = self.extract_key_value(hidden, state=state)
        layer_state = tuple(s[:, :, self.layer_id] for s in state[2:]) if state is not None else None
        rwkv, layer_state = rwkv_linear_attention_cpu(
            self.time_decay,
            self.time_first,
            key,
            value,
            state=layer_state,
            return_state=use_cache,
        )

        if layer_state is not None:
            state[2][:, :, self.layer_id] = layer_state[0]
            state[3][:, :, self.layer_id] = layer_state[1]
            state[4][:, :, self.layer_id] = layer_state[2]

        return self.output(receptance * rwkv), state


class RwkvFeedForward(nn.Module):
    def __init__(self, layer_id=0):
        super().__init__()
        self.layer_id = layer_id
        hidden_size = HIDDEN_SIZE
        intermediate_size = INTERMEDIATE_SIZE

        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.time_mix_key = nn.Parameter(torch.empty(1, 1, hidden_size))
        self.time_mix_receptance = nn.Parameter(torch.empty(1, 1, hidden_size))

        self.key = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.receptance = nn.Linear(hidden_size, hidden_size, bias=False)
        self.value = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, hidden, state=None):
        if hidden.size(1) == 1 and state is not None:
            shifted = state[0][:, :, self.layer_id]
        else:
            shifted = self.time_shift(hidden)
            if state is not None:
                shifted[:, 0] = state[0][:, :, self.layer_id]
        key = hidden * self.time_mix_key + shifted * (1 - self.time_mix_key)
        receptance = hidden * self.time_mix_receptance + shifted * (1 - self.time_mix_receptance)

        key = torch.square(torch.relu(self.key(key)))
        value = self.value(key)
        receptance = torch.sigmoid(self.receptance(receptance))

        if state is not None:
            state[0][:, :, self.layer_id] = hidden[:, -1]

        return receptance * value, state


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_id = LAYER_ID
        self.ln1 = nn.LayerNorm(HIDDEN_SIZE, eps=LAYER_NORM_EPSILON)
        self.ln2 = nn.LayerNorm(HIDDEN_SIZE, eps=LAYER_NORM_EPSILON)
        self.attention = RwkvSelfAttention(LAYER_ID)
        self.feed_forward = RwkvFeedForward(LAYER_ID)

        with torch.no_grad():
            # RwkvPreTrainedModel._init_weights
            ratio_0_to_1 = LAYER_ID / (NUM_HIDDEN_LAYERS - 1)
            ratio_1_to_almost0 = 1.0 - (LAYER_ID / NUM_HIDDEN_LAYERS)
            time_weight = torch.tensor([i / HIDDEN_SIZE for i in range(HIDDEN_SIZE)])[None, None, :]
            decay_speed = [
                -5 + 8 * (h / (ATTENTION_HIDDEN_SIZE - 1)) ** (0.7 + 1.3 * ratio_0_to_1)
                for h in range(ATTENTION_HIDDEN_SIZE)
            ]
            decay_speed = torch.tensor(decay_speed)
            zigzag = torch.tensor([(i + 1) % 3 - 1 for i in range(ATTENTION_HIDDEN_SIZE)]) * 0.5
            self.attention.time_decay.copy_(decay_speed)
            self.attention.time_first.copy_(torch.ones(ATTENTION_HIDDEN_SIZE) * math.log(0.3) + zigzag)
            self.attention.time_mix_key.copy_(torch.pow(time_weight, ratio_1_to_almost0))
            self.attention.time_mix_value.copy_(
                torch.pow(time_weight, ratio_1_to_almost0) + 0.3 * ratio_0_to_1
            )
            self.attention.time_mix_receptance.copy_(torch.pow(time_weight, 0.5 * ratio_1_to_almost0))
            self.feed_forward.time_mix_key.copy_(torch.pow(time_weight, ratio_1_to_almost0))
            self.feed_forward.time_mix_receptance.copy_(torch.pow(time_weight, ratio_1_to_almost0))
            # trained layer norms (mid-stack gains above 1, so each branch adds a visible update)
            self.ln1.weight.uniform_(1.0, 3.0)
            self.ln2.weight.uniform_(0.8, 2.0)
            for ln in (self.ln1, self.ln2):
                ln.bias.uniform_(-0.1, 0.1)
        self.eval()

    def forward(self, hidden):
        # RwkvBlock.forward (layer_id != 0, so no pre_ln), state=None, use_cache=False
        attention, state = self.attention(self.ln1(hidden), state=None, use_cache=False)
        hidden = hidden + attention

        feed_forward, state = self.feed_forward(self.ln2(hidden), state=state)
        hidden = hidden + feed_forward
        return hidden


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, HIDDEN_SIZE)]


def get_init_inputs():
    return []
