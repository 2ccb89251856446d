"""Configuration text shared by the tests that run jobs through the run layer."""


def model_toml(d: int = 2, beta: float = 1.0, flow: str = "ascent", units: int | None = 2,
               activation: str = "relu", seed: int = 111) -> str:
    """The [model] table of a configuration (with a random perceptron of ``units`` units unless None)."""
    text = f'[model]\nd = {d}\nbeta = {beta!r}\nflow = "{flow}"\n'
    if units is not None:
        text += f'[model.perceptron]\nunits = {units}\nactivation = "{activation}"\nseed = {seed}\n'
    return text
