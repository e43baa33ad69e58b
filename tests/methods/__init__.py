"""The methods one by one: directions, line searches, initial steps, bounds, least squares."""
