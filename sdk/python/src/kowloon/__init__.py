"""Kowloon: a Python client for remote GPU compute.

>>> import numpy as np, kowloon
>>> client = kowloon.Client()            # KOWLOON_URL, KOWLOON_API_KEY
>>> out = client.run("gemm", a=np.eye(2, dtype="f4"), b=np.ones((2, 2), "f4"), alpha=2.0)
>>> out["c"]
array([[2., 2.], [2., 2.]], dtype=float32)

``kowloon.AsyncClient`` is the same API for asyncio.
"""

from ._base import RetryPolicy, __version__
from ._errors import (ApiError, AuthenticationError, BadRequestError, ConflictError,
                      JobFailedError, KowloonError, NotFoundError, NotOfferedError,
                      PayloadTooLargeError, PermissionDeniedError, RateLimitError,
                      TransportError, UnavailableError, ValidationError, WaitTimeout)
from ._wire import Event
from .aio import AsyncClient, AsyncJob, AsyncJobs
from .client import Client, Job, Jobs

__all__ = [
    "Client", "Job", "Jobs", "AsyncClient", "AsyncJob", "AsyncJobs", "Event", "RetryPolicy",
    "KowloonError", "TransportError", "ApiError", "BadRequestError", "AuthenticationError",
    "PermissionDeniedError", "NotFoundError", "NotOfferedError", "ConflictError",
    "PayloadTooLargeError", "ValidationError", "RateLimitError", "UnavailableError",
    "JobFailedError", "WaitTimeout", "__version__",
]
