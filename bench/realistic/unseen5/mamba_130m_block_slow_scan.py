"""Mamba-130m's residual block as transformers writes it (MambaBlock: MambaRMSNorm, eps 1e-5,
the residual kept in fp32) around MambaMixer's pure-PyTorch path (slow_forward, the one taken
without the mamba-ssm / causal-conv1d CUDA kernels): in_proj 768 -> 2 x 1536 (no bias) split
into hidden_states and gate; the depthwise causal Conv1d (kernel 4, padding 3, sliced back to
the sequence) and SiLU; x_proj 1536 -> 48 + 16 + 16 split into time_step, B and C; dt_proj
48 -> 1536 and softplus; A = -exp(A_log); the discretisation discrete_A = exp(A * dt) and
deltaB_u = dt * B * x, both [batch, 1536, length, 16]; the selective scan as the sequential
loop over the tokens (state = discrete_A[:, :, i] * state + deltaB_u[:, :, i], then
matmul with C[:, i]), stacked; the D skip, times SiLU(gate), out_proj 1536 -> 768; the residual
add. A prefill of batch 4 x 128 prompt tokens (an LLM block without attention: a state-space
model)."""

import math

import torch
import torch.nn as nn

HIDDEN, INTERMEDIATE, STATE, CONV_KERNEL, EPS = 768, 1536, 16, 4, 1e-5
TIME_STEP_RANK = math.ceil(HIDDEN / 16)
TIME_STEP_MIN, TIME_STEP_MAX, TIME_STEP_FLOOR = 0.001, 0.1, 1e-4
BATCH, LENGTH = 4, 128


class MambaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class MambaMixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden_size = HIDDEN
        self.ssm_state_size = STATE
        self.conv_kernel_size = CONV_KERNEL
        self.intermediate_size = INTERMEDIATE
        self.time_step_rank = int(TIME_STEP_RANK)
        self.use_conv_bias = True
        self.conv1d = nn.Conv1d(
            in_channels=self.intermediate_size,
            out_channels=self.intermediate_size,
            bias=self.use_conv_bias,
            kernel_size=CONV_KERNEL,
            groups=self.intermediate_size,
            padding=CONV_KERNEL - 1,
        )

        self.activation = "silu"
        self.act = nn.SiLU()

        # projection of the input hidden states
        self.in_proj = nn.Linear(self.hidden_size, self.intermediate_size * 2, bias=False)
        # selective projection used to make dt, B and C input dependant
        self.x_proj = nn.Linear(
            self.intermediate_size, self.time_step_rank + self.ssm_state_size * 2, bias=False
        )
        # time step projection (discretization)
        self.dt_proj = nn.Linear(self.time_step_rank, self.intermediate_size, bias=True)

        # S4D real initialization. These are not discretized!
        A = torch.arange(1, self.ssm_state_size + 1, dtype=torch.float32)[None, :]
        A = A.expand(self.intermediate_size, -1).contiguous()

        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(self.intermediate_size))
        self.out_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.use_bias = False

    def slow_forward(self, input_states):
        batch_size, seq_len, _ = input_states.shape
        dtype = input_states.dtype
        # 1. Gated MLP's linear projection: [batch, 2 * intermediate_size, seq_len]
        projected_states = self.in_proj(input_states).transpose(1, 2)
        hidden_states, gate = projected_states.chunk(2, dim=1)

        # 2. Convolution sequence transformation
        ssm_state = torch.zeros(
            (batch_size, self.intermediate_size, self.ssm_state_size),
            device=hidden_states.device,
            dtype=dtype,
        )
        # [batch, intermediate_size, seq_len]
        hidden_states = self.act(self.conv1d(hidden_states)[..., :seq_len])

        # 3. State Space Model sequence transformation
        # 3.a. Selection:  [batch, seq_len, self.time_step_rank + self.ssm_state_size * 2]
        ssm_parameters = self.x_proj(hidden_states.transpose(1, 2))
        time_step, B, C = torch.split(
            ssm_parameters, [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1
        )
        # [batch, seq_len, intermediate_size] -> [batch, intermediate_size, seq_len]
        discrete_time_step = self.dt_proj(time_step)
        discrete_time_step = nn.functional.softplus(discrete_time_step).transpose(1, 2)

        # 3.b. Discretization: B and C to [batch, intermediate_size, seq_len, ssm_state_size] (SRAM)
        A = -torch.exp(self.A_log.float())  # [intermediate_size, ssm_state_size]
        discrete_A = torch.exp(A[None, :, None, :] * discrete_time_step[:, :, :, None])
        discrete_B = discrete_time_step[:, :, :, None] * B[:, None, :, :].float()
        deltaB_u = discrete_B * hidden_states[:, :, :, None].float()

        # 3.c perform the recurrence y <- SSM(A, B, C)(x)
        scan_outputs = []
        for i in range(seq_len):
            # [batch, intermediate_size, ssm_state]
            ssm_state = discrete_A[:, :, i, :] * ssm_state + deltaB_u[:, :, i, :]
            # [batch, intermediate_size, 1]
            scan_output = torch.matmul(ssm_state.to(dtype), C[:, i, :].unsqueeze(-1))
            scan_outputs.append(scan_output[:, :, 0])
        scan_output = torch.stack(scan_outputs, dim=-1)  # [batch, intermediate_size, seq_len]
        scan_output = scan_output + (hidden_states * self.D[None, :, None])
        scan_output = scan_output * self.act(gate)

        # 4. Final linear projection: [batch, seq_len, hidden_size]
        contextualized_states = self.out_proj(scan_output.transpose(1, 2))
        return contextualized_states

    def forward(self, hidden_states):
        return self.slow_forward(hidden_states)


class MambaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.residual_in_fp32 = True
        self.norm = MambaRMSNorm(HIDDEN, eps=EPS)
        self.mixer = MambaMixer()

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.norm(hidden_states.to(dtype=self.norm.weight.dtype))
        if self.residual_in_fp32:
            residual = residual.to(torch.float32)

        hidden_states = self.mixer(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = MambaBlock()
        mixer = self.layer.mixer
        with torch.no_grad():  # MambaPreTrainedModel._init_weights, and a trained norm
            dt_init_std = TIME_STEP_RANK**-0.5
            mixer.dt_proj.weight.uniform_(-dt_init_std, dt_init_std)
            dt = torch.exp(
                torch.rand(INTERMEDIATE) * (math.log(TIME_STEP_MAX) - math.log(TIME_STEP_MIN))
                + math.log(TIME_STEP_MIN)
            ).clamp(min=TIME_STEP_FLOOR)
            inv_dt = dt + torch.log(-torch.expm1(-dt))
            mixer.dt_proj.bias.copy_(inv_dt)
            self.layer.norm.weight.uniform_(0.5, 1.5)
            # trained projections are wider than their initialisation (the mixer's share of the residual is O(1))
            mixer.in_proj.weight.normal_(0.0, 0.04)
            mixer.out_proj.weight.normal_(0.0, 0.05)

    def forward(self, hidden_states):
        return self.layer(hidden_states)


def get_inputs():
    return [torch.randn(BATCH, LENGTH, HIDDEN)]


def get_init_inputs():
    return []
