"""Reward-side math of the methods: shaping that needs the whole group (:mod:`.shaping`) and HiLL's
hint reward (:mod:`.hints`)."""
