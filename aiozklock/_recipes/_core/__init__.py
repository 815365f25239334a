"""The queue machinery shared by every recipe: names, holding + loss policy, janitor, queue."""
