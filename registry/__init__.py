"""Publishing, listing and downloading datasets on remotes Minari can use."""
