"""`millrace demo`: the main job end to end, driving every room in turn (see `demo.run`).

It lies above all the rooms, so that the frame (`millrace`) imports none of them.
"""
